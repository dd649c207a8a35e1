package graph_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// gql runs a document that must succeed and decodes its data into out.
func gql(t *testing.T, srv *testserver.Server, token, query string, vars map[string]any, out any) {
	t.Helper()
	g := srv.GraphQL(t, token, query, vars)
	if len(g.Errors) > 0 {
		t.Fatalf("graphql errors: %+v\n%s", g.Errors, query)
	}
	if err := json.Unmarshal(g.Data, out); err != nil {
		t.Fatalf("decode %s: %v", g.Data, err)
	}
}

// gqlError runs a document that must fail with code (in extensions.code)
// and leave data null.
func gqlError(t *testing.T, srv *testserver.Server, token, query string, vars map[string]any, code string) *testserver.GraphQLResult {
	t.Helper()
	g := srv.GraphQL(t, token, query, vars)
	if g.ErrorCode() != code {
		t.Fatalf("want %s, got errors %+v data %s\n%s", code, g.Errors, g.Data, query)
	}
	return g
}

type businessObj struct {
	ID, Name, Status, CreatedAt, UpdatedAt string
}

type memberObj struct {
	ID, BusinessID, UserID, Role, Status string
}

type pageInfo struct {
	HasNextPage, HasPreviousPage bool
	StartCursor, EndCursor       *string
}

const businessFields = `id name status createdAt updatedAt`
const memberFields = `id businessId userId role status`

func TestBusinessesGraphQL(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			srv := testserver.Start(t, testserver.Options{Dialect: dialect})
			owner, member, stranger := srv.User(t), srv.User(t), srv.User(t)
			device := srv.Device(t)

			create := `mutation($input: CreateBusinessInput!) { createBusiness(input: $input) { ` + businessFields + ` } }`
			var ids []string
			for _, name := range []string{"Beta", "Alpha", "Gamma"} {
				var out struct{ CreateBusiness businessObj }
				gql(t, srv, owner.Token, create, map[string]any{"input": map[string]any{"name": name}}, &out)
				b := out.CreateBusiness
				if !strings.HasPrefix(b.ID, "biz_") || b.Name != name || b.Status != "ACTIVE" || b.CreatedAt == "" || b.UpdatedAt == "" {
					t.Fatalf("createBusiness: %+v", b)
				}
				ids = append(ids, b.ID)
			}
			bizID := ids[0]

			// Relay pagination over the caller's own businesses, oldest
			// first: two pages of two make up the whole list.
			page := `query($first: Int, $after: Cursor) { businesses(first: $first, after: $after) {
				totalCount pageInfo { hasNextPage hasPreviousPage startCursor endCursor } edges { cursor node { id name createdAt } } } }`
			type conn struct {
				TotalCount int
				PageInfo   pageInfo
				Edges      []struct {
					Cursor string
					Node   businessObj
				}
			}
			var all struct{ Businesses conn }
			gql(t, srv, owner.Token, page, nil, &all)
			if all.Businesses.TotalCount != 3 || len(all.Businesses.Edges) != 3 || all.Businesses.PageInfo.HasNextPage {
				t.Fatalf("all businesses: %+v", all.Businesses)
			}
			seen := map[string]bool{}
			for i, e := range all.Businesses.Edges {
				seen[e.Node.ID] = true
				if i > 0 && e.Node.CreatedAt < all.Businesses.Edges[i-1].Node.CreatedAt {
					t.Fatalf("not oldest first: %+v", all.Businesses.Edges)
				}
			}
			for _, id := range ids {
				if !seen[id] {
					t.Fatalf("%s missing from %+v", id, all.Businesses.Edges)
				}
			}
			var p1 struct{ Businesses conn }
			gql(t, srv, owner.Token, page, map[string]any{"first": 2}, &p1)
			if p1.Businesses.TotalCount != 3 || len(p1.Businesses.Edges) != 2 || !p1.Businesses.PageInfo.HasNextPage ||
				p1.Businesses.Edges[0].Node.ID != all.Businesses.Edges[0].Node.ID || p1.Businesses.Edges[1].Node.ID != all.Businesses.Edges[1].Node.ID {
				t.Fatalf("first page: %+v", p1.Businesses)
			}
			var p2 struct{ Businesses conn }
			gql(t, srv, owner.Token, page, map[string]any{"first": 2, "after": *p1.Businesses.PageInfo.EndCursor}, &p2)
			if len(p2.Businesses.Edges) != 1 || p2.Businesses.PageInfo.HasNextPage || p2.Businesses.Edges[0].Node.ID != all.Businesses.Edges[2].Node.ID {
				t.Fatalf("second page: %+v", p2.Businesses)
			}
			var sorted struct{ Businesses conn }
			gql(t, srv, owner.Token, `{ businesses(orderBy: {field: NAME, direction: DESC}, where: {nameNEQ: "Beta"}) { totalCount edges { node { name } } } }`, nil, &sorted)
			if len(sorted.Businesses.Edges) != 2 || sorted.Businesses.Edges[0].Node.Name != "Gamma" || sorted.Businesses.Edges[1].Node.Name != "Alpha" {
				t.Fatalf("ordered and filtered: %+v", sorted.Businesses)
			}
			var none struct{ Businesses conn }
			gql(t, srv, stranger.Token, page, nil, &none)
			if none.Businesses.TotalCount != 0 || len(none.Businesses.Edges) != 0 {
				t.Fatalf("a stranger's businesses: %+v", none.Businesses)
			}
			gqlError(t, srv, owner.Token, page, map[string]any{"first": 101}, "validation_failed")
			gqlError(t, srv, device.Token, page, nil, "forbidden")
			gqlError(t, srv, "", page, nil, "unauthorized")

			// Members: the same mutations as REST, returning the object.
			add := `mutation($b: ID!, $input: AddBusinessUserInput!) { addBusinessUser(businessId: $b, input: $input) { ` + memberFields + ` } }`
			var added struct{ AddBusinessUser memberObj }
			gql(t, srv, owner.Token, add, map[string]any{"b": bizID, "input": map[string]any{"email": member.Email, "role": "MEMBER"}}, &added)
			m := added.AddBusinessUser
			if !strings.HasPrefix(m.ID, "bzu_") || m.BusinessID != bizID || m.UserID != member.ID || m.Role != "MEMBER" || m.Status != "ACTIVE" {
				t.Fatalf("addBusinessUser: %+v", m)
			}
			gqlError(t, srv, owner.Token, add, map[string]any{"b": bizID, "input": map[string]any{"email": member.Email, "role": "MEMBER"}}, "already_exists")
			gqlError(t, srv, owner.Token, add, map[string]any{"b": bizID, "input": map[string]any{"email": stranger.Email, "role": "VIEWER"}}, "validation_failed")
			gqlError(t, srv, member.Token, add, map[string]any{"b": bizID, "input": map[string]any{"email": stranger.Email, "role": "MEMBER"}}, "forbidden")
			gqlError(t, srv, stranger.Token, add, map[string]any{"b": bizID, "input": map[string]any{"email": stranger.Email, "role": "MEMBER"}}, "not_found")

			// business(id:) with its members connection, paginated.
			one := `query($id: ID!, $after: Cursor) { business(id: $id) { ` + businessFields + `
				members(first: 1, after: $after) { totalCount pageInfo { hasNextPage endCursor } edges { node { ` + memberFields + ` } } } } }`
			type membersConn struct {
				TotalCount int
				PageInfo   pageInfo
				Edges      []struct{ Node memberObj }
			}
			var got struct {
				Business *struct {
					businessObj
					Members membersConn
				}
			}
			gql(t, srv, member.Token, one, map[string]any{"id": bizID}, &got)
			if got.Business == nil || got.Business.ID != bizID || got.Business.Members.TotalCount != 2 ||
				len(got.Business.Members.Edges) != 1 || !got.Business.Members.PageInfo.HasNextPage ||
				got.Business.Members.Edges[0].Node.UserID != owner.ID || got.Business.Members.Edges[0].Node.Role != "OWNER" {
				t.Fatalf("business as member: %+v", got.Business)
			}
			ownerMembership := got.Business.Members.Edges[0].Node.ID
			gql(t, srv, member.Token, one, map[string]any{"id": bizID, "after": *got.Business.Members.PageInfo.EndCursor}, &got)
			if len(got.Business.Members.Edges) != 1 || got.Business.Members.PageInfo.HasNextPage || got.Business.Members.Edges[0].Node.ID != m.ID {
				t.Fatalf("second members page: %+v", got.Business.Members)
			}
			// A member's dashboard: every business with its members.
			var dash struct {
				Businesses struct {
					Edges []struct {
						Node struct {
							ID      string
							Members membersConn
						}
					}
				}
			}
			gql(t, srv, member.Token, `{ businesses { edges { node { id members { totalCount edges { node { userId } } } } } } }`, nil, &dash)
			if len(dash.Businesses.Edges) != 1 || dash.Businesses.Edges[0].Node.ID != bizID || dash.Businesses.Edges[0].Node.Members.TotalCount != 2 {
				t.Fatalf("member's dashboard: %+v", dash)
			}

			// Non-members see null, without an error; node(id:) agrees.
			g := srv.GraphQL(t, stranger.Token, one, map[string]any{"id": bizID})
			if len(g.Errors) != 0 || string(g.Data) != `{"business":null}` {
				t.Fatalf("business as stranger: %s %+v", g.Data, g.Errors)
			}
			nodes := `query($ids: [ID!]!) { nodes(ids: $ids) { id ... on Business { name } ... on BusinessUser { role } } }`
			var ns struct {
				Nodes []*struct{ ID, Name, Role string }
			}
			gql(t, srv, member.Token, nodes, map[string]any{"ids": []string{bizID, m.ID, ids[1]}}, &ns)
			if len(ns.Nodes) != 3 || ns.Nodes[0] == nil || ns.Nodes[0].Name != "Beta" || ns.Nodes[1] == nil || ns.Nodes[1].Role != "MEMBER" || ns.Nodes[2] != nil {
				t.Fatalf("nodes as member: %+v", ns.Nodes)
			}
			ns.Nodes = nil
			gql(t, srv, stranger.Token, nodes, map[string]any{"ids": []string{bizID, m.ID}}, &ns)
			if len(ns.Nodes) != 2 || ns.Nodes[0] != nil || ns.Nodes[1] != nil {
				t.Fatalf("nodes as stranger: %+v", ns.Nodes)
			}

			// Writes: the member is refused with the REST door's code; the
			// owner gets the resulting object.
			update := `mutation($id: ID!, $input: UpdateBusinessInput!) { updateBusiness(id: $id, input: $input) { ` + businessFields + ` } }`
			g = gqlError(t, srv, member.Token, update, map[string]any{"id": bizID, "input": map[string]any{"name": "Mine"}}, "forbidden")
			if string(g.Data) != "null" {
				t.Fatalf("refused mutation data: %s", g.Data)
			}
			if r := srv.Do(t, "POST", "/api/v1/businesses/"+bizID+"/update-business", member.Token, map[string]any{"name": "Mine"}); r.Status != 403 || r.Code() != "forbidden" {
				t.Fatalf("REST twin: %d %s", r.Status, r.Body)
			}
			var upd struct{ UpdateBusiness businessObj }
			gql(t, srv, owner.Token, update, map[string]any{"id": bizID, "input": map[string]any{"name": "Beta Two"}}, &upd)
			if upd.UpdateBusiness.Name != "Beta Two" || upd.UpdateBusiness.ID != bizID {
				t.Fatalf("updateBusiness: %+v", upd.UpdateBusiness)
			}
			g = gqlError(t, srv, owner.Token, update, map[string]any{"id": bizID, "input": map[string]any{"name": ""}}, "validation_failed")
			if d, _ := g.Errors[0].Extensions["details"].([]any); len(d) != 1 || !strings.Contains(fmt.Sprint(d[0]), "name") {
				t.Fatalf("validation details: %+v", g.Errors[0].Extensions)
			}

			status := `mutation($id: ID!, $s: BusinessStatus!) { updateBusinessStatus(id: $id, input: {status: $s}) { id status } }`
			var st struct{ UpdateBusinessStatus businessObj }
			gql(t, srv, owner.Token, status, map[string]any{"id": bizID, "s": "INACTIVE"}, &st)
			if st.UpdateBusinessStatus.Status != "INACTIVE" {
				t.Fatalf("updateBusinessStatus: %+v", st)
			}
			gqlError(t, srv, owner.Token, update, map[string]any{"id": bizID, "input": map[string]any{"name": "x"}}, "business_inactive")
			gqlError(t, srv, owner.Token, status, map[string]any{"id": bizID, "s": "DELETED"}, "validation_failed")
			gqlError(t, srv, member.Token, status, map[string]any{"id": bizID, "s": "ACTIVE"}, "forbidden")
			gql(t, srv, owner.Token, status, map[string]any{"id": bizID, "s": "ACTIVE"}, &st)
			if st.UpdateBusinessStatus.Status != "ACTIVE" {
				t.Fatalf("reactivated: %+v", st)
			}

			userStatus := `mutation($b: ID!, $id: ID!, $s: BusinessUserStatus!) { updateBusinessUserStatus(businessId: $b, id: $id, input: {status: $s}) { ` + memberFields + ` } }`
			gqlError(t, srv, owner.Token, userStatus, map[string]any{"b": bizID, "id": ownerMembership, "s": "INACTIVE"}, "last_owner")
			var us struct{ UpdateBusinessUserStatus memberObj }
			gql(t, srv, owner.Token, userStatus, map[string]any{"b": bizID, "id": m.ID, "s": "INACTIVE"}, &us)
			if us.UpdateBusinessUserStatus.ID != m.ID || us.UpdateBusinessUserStatus.Status != "INACTIVE" {
				t.Fatalf("updateBusinessUserStatus: %+v", us)
			}
			// The deactivated member no longer sees the business anywhere.
			g = srv.GraphQL(t, member.Token, one, map[string]any{"id": bizID})
			if len(g.Errors) != 0 || string(g.Data) != `{"business":null}` {
				t.Fatalf("business as deactivated member: %s %+v", g.Data, g.Errors)
			}
			gql(t, srv, member.Token, page, nil, &none)
			if none.Businesses.TotalCount != 0 {
				t.Fatalf("deactivated member's businesses: %+v", none.Businesses)
			}
		})
	}
}

// Business vouchers through the real binary: a voucher reserved with
// businessId is the business's deposit, readable by its ACTIVE members on
// both doors and followed by their voucherUpdated(businessId:), hidden
// from everyone else and from a member once deactivated; an INACTIVE
// business takes no new vouchers.
func TestBusinessVouchersEndToEnd(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			srv := testserver.Start(t, testserver.Options{Dialect: dialect})
			owner, member, stranger := srv.User(t), srv.User(t), srv.User(t)
			payer := srv.Device(t)
			_, code := srv.Session(t, payer)

			r := srv.Do(t, "POST", "/api/v1/businesses/create-business", owner.Token, map[string]any{"name": "Deposits Inc"})
			bizID := fmt.Sprint(r.Map(t)["id"])
			base := "/api/v1/businesses/" + bizID
			r = srv.Do(t, "POST", base+"/users/add-user", owner.Token, map[string]any{"email": member.Email, "role": "MEMBER"})
			if r.Status != 200 {
				t.Fatalf("add-user: %d %s", r.Status, r.Body)
			}
			memberID := fmt.Sprint(r.Map(t)["id"])

			// The member's dashboard follows the business; a stranger may not.
			ws := dialWS(t, wsURL(srv.URL), transportWS)
			ws.init(member.Token)
			ws.subscribe("biz", `subscription($b: ID) { voucherUpdated(businessId: $b) { id status businessId } }`, map[string]any{"b": bizID})
			other := dialWS(t, wsURL(srv.URL), transportWS)
			other.init(stranger.Token)
			other.subscribe("biz", `subscription($b: ID) { voucherUpdated(businessId: $b) { id } }`, map[string]any{"b": bizID})
			if c := other.failure("biz", 5*time.Second); c != "not_found" {
				t.Fatalf("stranger's subscription: %s", c)
			}
			// A business subscription sends nothing until a change, and the
			// protocol has no subscribe ack: wait until the server holds it.
			waitFor(t, 10*time.Second, func() bool {
				m := srv.Do(t, "GET", "/metrics", "", nil)
				return strings.Contains(string(m.Body), "\nvoucherd_subscriptions 1\n")
			})

			reserve := func(token string) *testserver.Response {
				return srv.Do(t, "POST", "/api/v1/vouchers/reserve-voucher", token, map[string]any{"code": code, "businessId": bizID})
			}
			r = reserve(owner.Token)
			if r.Status != 200 {
				t.Fatalf("reserve for the business: %d %s", r.Status, r.Body)
			}
			vid := fmt.Sprint(r.Map(t)["id"])
			var ev struct {
				VoucherUpdated struct{ ID, Status, BusinessID string }
			}
			ws.result("biz", 5*time.Second, &ev)
			if ev.VoucherUpdated.ID != vid || ev.VoucherUpdated.BusinessID != bizID || ev.VoucherUpdated.Status != "RESERVED" {
				t.Fatalf("subscription event: %+v", ev.VoucherUpdated)
			}

			getVoucher := func(token string) *testserver.Response {
				return srv.Do(t, "GET", "/api/v1/vouchers/"+vid, token, nil)
			}
			gqlVoucher := func(token string) *testserver.GraphQLResult {
				return srv.GraphQL(t, token, `query($id: ID!) { voucher(id: $id) { id businessId } }`, map[string]any{"id": vid})
			}
			if r := getVoucher(member.Token); r.Status != 200 || r.Map(t)["businessId"] != bizID {
				t.Fatalf("member reads the deposit: %d %s", r.Status, r.Body)
			}
			if g := gqlVoucher(member.Token); len(g.Errors) != 0 || !strings.Contains(string(g.Data), bizID) {
				t.Fatalf("member's voucher(id:): %s %+v", g.Data, g.Errors)
			}
			if r := getVoucher(stranger.Token); r.Status != 404 || r.Code() != "not_found" {
				t.Fatalf("stranger reads the deposit: %d %s", r.Status, r.Body)
			}
			if g := gqlVoucher(stranger.Token); len(g.Errors) != 0 || string(g.Data) != `{"voucher":null}` {
				t.Fatalf("stranger's voucher(id:): %s %+v", g.Data, g.Errors)
			}
			if r := reserve(stranger.Token); r.Status != 404 || r.Code() != "not_found" {
				t.Fatalf("stranger reserves for the business: %d %s", r.Status, r.Body)
			}
			// Any ACTIVE member may reserve for it.
			if r := reserve(member.Token); r.Status != 200 || r.Map(t)["businessId"] != bizID {
				t.Fatalf("member reserves for the business: %d %s", r.Status, r.Body)
			}

			// Deactivated, the member sees nothing and reserves nothing.
			if r := srv.Do(t, "POST", base+"/users/"+memberID+"/update-status", owner.Token, map[string]any{"status": "INACTIVE"}); r.Status != 200 {
				t.Fatalf("deactivate: %d %s", r.Status, r.Body)
			}
			if r := getVoucher(member.Token); r.Status != 404 {
				t.Fatalf("deactivated member reads the deposit: %d %s", r.Status, r.Body)
			}
			if g := gqlVoucher(member.Token); string(g.Data) != `{"voucher":null}` {
				t.Fatalf("deactivated member's voucher(id:): %s %+v", g.Data, g.Errors)
			}
			if r := reserve(member.Token); r.Status != 404 || r.Code() != "not_found" {
				t.Fatalf("deactivated member reserves: %d %s", r.Status, r.Body)
			}

			// An INACTIVE business keeps its reads and takes no new vouchers.
			if r := srv.Do(t, "POST", base+"/update-status", owner.Token, map[string]any{"status": "INACTIVE"}); r.Status != 200 {
				t.Fatalf("deactivate business: %d %s", r.Status, r.Body)
			}
			if r := reserve(owner.Token); r.Status != 400 || r.Code() != "business_inactive" {
				t.Fatalf("reserve for an inactive business: %d %s", r.Status, r.Body)
			}
			if r := getVoucher(owner.Token); r.Status != 200 {
				t.Fatalf("owner reads a deposit of the inactive business: %d %s", r.Status, r.Body)
			}
		})
	}
}
