package graph_test

import (
	"encoding/json"
	"testing"

	"github.com/voucherd/voucherd/ent/businessuser"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

type vouchersPage struct {
	Vouchers struct {
		TotalCount int
		Edges      []struct {
			Cursor string
			Node   struct{ ID, Status string }
		}
		PageInfo struct {
			HasNextPage, HasPreviousPage bool
			StartCursor, EndCursor       *string
		}
	}
}

func (p vouchersPage) ids() []string {
	var out []string
	for _, e := range p.Vouchers.Edges {
		out = append(out, e.Node.ID)
	}
	return out
}

const vouchersQuery = `query($first: Int, $after: Cursor, $last: Int, $before: Cursor, $order: VoucherOrder, $where: VoucherWhereInput) {
	vouchers(first: $first, after: $after, last: $last, before: $before, orderBy: $order, where: $where) {
		totalCount edges { cursor node { id status } } pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
	}
}`

func (h *harness) page(t *testing.T, token string, vars map[string]any) vouchersPage {
	t.Helper()
	_, r := h.post(token, vouchersQuery, vars)
	if len(r.Errors) > 0 {
		t.Fatalf("vouchers: %s", r.raw)
	}
	var p vouchersPage
	if err := json.Unmarshal(r.Data, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func equalIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: got %v, want %v", what, got, want)
		}
	}
}

// The vouchers connection: who sees what (payee, payer, ACTIVE business
// members, nobody else), newest first, cursors both ways, filters and
// order; and node/nodes with the same visibility.
func TestVouchersConnectionAndNodes(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			h := newHarness(t, dialect, harnessOptions{})
			payer, stranger, owner, member := h.device(), h.device(), h.user(), h.user()
			ses, payee := h.session(payer)
			biz, err := h.businesses.Create(owner.ctx(), business.CreateInput{Name: ptr("Kiosk")})
			if err != nil {
				t.Fatal(err)
			}
			email := h.db.User.GetX(owner.ctx(), member.p.ID).Email
			role := businessuser.RoleMEMBER
			if _, err := h.businesses.AddUser(owner.ctx(), biz.ID, business.AddUserInput{Email: &email, Role: &role}); err != nil {
				t.Fatal(err)
			}
			var all []string // oldest first
			for i := 0; i < 4; i++ {
				all = append(all, h.reserve(payee, ses.Code, nil).ID)
			}
			h.redeem(payee, all[1], "2")
			bizVoucher := h.reserve(owner, ses.Code, &biz.ID).ID
			all = append(all, bizVoucher)
			newestFirst := []string{all[4], all[3], all[2], all[1], all[0]}

			// The payer sees every voucher of its session, newest first.
			p := h.page(t, payer.token, nil)
			equalIDs(t, "payer", p.ids(), newestFirst)
			if p.Vouchers.TotalCount != 5 || p.Vouchers.PageInfo.HasNextPage {
				t.Fatalf("payer page: %+v", p.Vouchers.PageInfo)
			}
			// The payee (resource token) sees what it reserved; the member
			// sees the business's voucher; the stranger nothing.
			equalIDs(t, "payee", h.page(t, payee.token, nil).ids(), newestFirst[1:])
			equalIDs(t, "member", h.page(t, member.token, nil).ids(), []string{bizVoucher})
			equalIDs(t, "stranger", h.page(t, stranger.token, nil).ids(), nil)

			// Forward and backward pages.
			p1 := h.page(t, payer.token, map[string]any{"first": 2})
			equalIDs(t, "first 2", p1.ids(), newestFirst[:2])
			if !p1.Vouchers.PageInfo.HasNextPage {
				t.Fatal("first page: hasNextPage false")
			}
			p2 := h.page(t, payer.token, map[string]any{"first": 2, "after": *p1.Vouchers.PageInfo.EndCursor})
			equalIDs(t, "after", p2.ids(), newestFirst[2:4])
			p3 := h.page(t, payer.token, map[string]any{"last": 2, "before": *p2.Vouchers.PageInfo.StartCursor})
			equalIDs(t, "before", p3.ids(), newestFirst[:2])
			equalIDs(t, "last 1", h.page(t, payer.token, map[string]any{"last": 1}).ids(), newestFirst[4:])

			// Order and filters.
			equalIDs(t, "oldest first", h.page(t, payer.token, map[string]any{"order": map[string]any{"field": "CREATED_AT", "direction": "ASC"}}).ids(), all)
			equalIDs(t, "REDEEMED", h.page(t, payer.token, map[string]any{"where": map[string]any{"status": "REDEEMED"}}).ids(), []string{all[1]})
			equalIDs(t, "business", h.page(t, payer.token, map[string]any{"where": map[string]any{"businessIDNotNil": true}}).ids(), []string{bizVoucher})
			// A filter never widens what the caller may see.
			equalIDs(t, "stranger filtering by id", h.page(t, stranger.token, map[string]any{"where": map[string]any{"idIn": all}}).ids(), nil)

			// node and nodes go through the same visibility.
			nodes := `query($ids: [ID!]!) { nodes(ids: $ids) { id ... on Voucher { status } ... on VoucherSession { code } } }`
			var out struct {
				Nodes []*struct{ ID, Status, Code string }
			}
			ids := []string{all[0], "vch_doesnotexist", ses.ID, "junk", bizVoucher}
			_, r := h.post(payer.token, nodes, map[string]any{"ids": ids})
			if len(r.Errors) > 0 {
				t.Fatalf("nodes: %s", r.raw)
			}
			_ = json.Unmarshal(r.Data, &out)
			if len(out.Nodes) != 5 || out.Nodes[0] == nil || out.Nodes[0].ID != all[0] || out.Nodes[0].Status != "RESERVED" ||
				out.Nodes[1] != nil || out.Nodes[2] == nil || out.Nodes[2].Code != ses.Code || out.Nodes[3] != nil || out.Nodes[4] == nil {
				t.Fatalf("payer's nodes: %s", r.Data)
			}
			_, r = h.post(stranger.token, nodes, map[string]any{"ids": ids})
			_ = json.Unmarshal(r.Data, &out)
			for i, n := range out.Nodes {
				if n != nil {
					t.Fatalf("stranger sees node %d: %s", i, r.Data)
				}
			}
			_, r = h.post(member.token, `query($id: ID!) { node(id: $id) { id } }`, map[string]any{"id": bizVoucher})
			if len(r.Errors) > 0 || string(r.Data) != `{"node":{"id":"`+bizVoucher+`"}}` {
				t.Fatalf("member's node: %s", r.raw)
			}
		})
	}
}
