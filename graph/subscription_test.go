package graph_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gqlgraphql "github.com/99designs/gqlgen/graphql"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/businessuser"
	"github.com/voucherd/voucherd/graph"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

const voucherSub = `subscription($id: ID, $s: ID, $b: ID) {
	voucherUpdated(id: $id, sessionId: $s, businessId: $b) { id status version sessionId businessId expectedPayment { amount } }
}`

type subVoucher struct {
	ID, Status, SessionID string
	BusinessID            *string
	Version               int
	ExpectedPayment       *struct{ Amount string }
}

type subEvent struct {
	VoucherUpdated subVoucher
}

func (c *wsClient) voucher(id string) subVoucher {
	c.t.Helper()
	var ev subEvent
	c.result(id, 3*time.Second, &ev)
	return ev.VoucherUpdated
}

func want(t *testing.T, got subVoucher, id, status string, version int) {
	t.Helper()
	if got.ID != id || got.Status != status || got.Version != version {
		t.Fatalf("got %s %s v%d, want %s %s v%d", got.ID, got.Status, got.Version, id, status, version)
	}
}

// The voucher lifecycle as its watchers see it, on both databases and both
// subprotocols: the payee watching its voucher gets the current state
// first, then each change; the payer watching its session sees the
// reservation and the changes; nothing else arrives.
func TestVoucherUpdatedLifecycle(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			h := newHarness(t, dialect, harnessOptions{})
			for _, proto := range protocols {
				t.Run(proto, func(t *testing.T) {
					payer := h.device()
					ses, payee := h.session(payer)
					bySession := dialWS(t, h.ws, proto)
					bySession.init(payer.token)
					bySession.subscribe("s", voucherSub, map[string]any{"s": ses.ID})
					waitFor(t, 10*time.Second, func() bool { return h.hub.Stats().Subscriptions >= 1 })

					v := h.reserve(payee, ses.Code, nil)
					want(t, bySession.voucher("s"), v.ID, "RESERVED", 1)

					byID := dialWS(t, h.ws, proto)
					byID.init(payee.token)
					byID.subscribe("v", voucherSub, map[string]any{"id": v.ID})
					first := byID.voucher("v")
					want(t, first, v.ID, "RESERVED", 1)
					if first.SessionID != ses.ID || first.BusinessID != nil {
						t.Fatalf("current state: %+v", first)
					}

					h.redeem(payee, v.ID, "12.50")
					for _, c := range []*wsClient{byID, bySession} {
						got := c.voucher(map[*wsClient]string{byID: "v", bySession: "s"}[c])
						want(t, got, v.ID, "REDEEMED", 2)
						if got.ExpectedPayment == nil || got.ExpectedPayment.Amount != "12.5" && got.ExpectedPayment.Amount != "12.50" {
							t.Fatalf("expectedPayment = %+v", got.ExpectedPayment)
						}
					}
					r, _ := h.vouchers.Get(payee.ctx(), v.ID)
					h.resolve(payer, r)
					want(t, byID.voucher("v"), v.ID, "RESOLVED", 3)
					want(t, bySession.voucher("s"), v.ID, "RESOLVED", 3)

					// A voucher on another session reaches neither.
					other := h.device()
					ses2, payee2 := h.session(other)
					h.reserve(payee2, ses2.Code, nil)
					byID.quiet(200 * time.Millisecond)
					bySession.quiet(0)

					// Stopping ends the subscription: complete, then silence.
					byID.stop("v")
					if m := byID.next(2 * time.Second); m.Type != "complete" || m.ID != "v" {
						t.Fatalf("after stop: %s %s", m.Type, m.ID)
					}
					bySession.stop("s")
					waitFor(t, 10*time.Second, func() bool { return h.hub.Stats().Subscriptions == 0 })
				})
			}
		})
	}
}

// A business's dashboard sees the business's vouchers and no others; a
// member deactivated meanwhile stops receiving (not_found, as for reads).
func TestVoucherUpdatedByBusiness(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			h := newHarness(t, dialect, harnessOptions{graph: graph.Options{Recheck: time.Nanosecond}})
			owner, cashier, watcher := h.user(), h.user(), h.user()
			biz, err := h.businesses.Create(owner.ctx(), business.CreateInput{Name: ptr("Shop")})
			if err != nil {
				t.Fatal(err)
			}
			role := businessuser.RoleMEMBER
			var watcherMembership *ent.BusinessUser
			for _, u := range []caller{cashier, watcher} {
				email := h.db.User.GetX(context.Background(), u.p.ID).Email
				m, err := h.businesses.AddUser(owner.ctx(), biz.ID, business.AddUserInput{Email: &email, Role: &role})
				if err != nil {
					t.Fatal(err)
				}
				if u.p.ID == watcher.p.ID {
					watcherMembership = m
				}
			}
			dash := dialWS(t, h.ws, transportWS)
			dash.init(watcher.token)
			dash.subscribe("b", voucherSub, map[string]any{"b": biz.ID})
			waitFor(t, 10*time.Second, func() bool { return h.hub.Stats().Subscriptions == 1 })

			payer := h.device()
			ses, payee := h.session(payer)
			h.reserve(payee, ses.Code, nil) // not the business's
			v := h.reserve(cashier, ses.Code, &biz.ID)
			got := dash.voucher("b")
			want(t, got, v.ID, "RESERVED", 1)
			if got.BusinessID == nil || *got.BusinessID != biz.ID {
				t.Fatalf("businessId = %v", got.BusinessID)
			}
			// A member may also watch the business's voucher by id.
			byID := dialWS(t, h.ws, legacyWS)
			byID.init(watcher.token)
			byID.subscribe("v", voucherSub, map[string]any{"id": v.ID})
			want(t, byID.voucher("v"), v.ID, "RESERVED", 1)

			inactive := businessuser.StatusINACTIVE
			if _, err := h.businesses.SetUserStatus(owner.ctx(), biz.ID, watcherMembership.ID, business.UserStatusInput{Status: &inactive}); err != nil {
				t.Fatal(err)
			}
			h.redeem(cashier, v.ID, "3")
			if code := dash.failure("b", 3*time.Second); code != "not_found" {
				t.Fatalf("deactivated member's dashboard: %q, want not_found", code)
			}
			if code := byID.failure("v", 3*time.Second); code != "not_found" {
				t.Fatalf("deactivated member's voucher watch: %q, want not_found", code)
			}
			waitFor(t, 10*time.Second, func() bool { return h.hub.Stats().Subscriptions == 0 })
		})
	}
}

// Subscribers leave nothing behind: after their connections close, the
// hub is empty and the goroutine count is back where it was.
func TestSubscriptionsLeaveNothingBehind(t *testing.T) {
	h := newHarness(t, "sqlite3", harnessOptions{})
	payer := h.device()
	ses, _ := h.session(payer)
	time.Sleep(50 * time.Millisecond)
	before := runtime.NumGoroutine()
	var conns []*wsClient
	for i := 0; i < 20; i++ {
		c := dialWS(t, h.ws, protocols[i%2])
		c.init(payer.token)
		c.subscribe("1", sessionSub, map[string]any{"s": ses.ID})
		c.subscribe("2", sessionSub, map[string]any{"s": ses.ID})
		conns = append(conns, c)
	}
	waitFor(t, 3*time.Second, func() bool { return h.hub.Stats().Subscriptions == 40 })
	for _, c := range conns {
		_ = c.conn.Close()
	}
	waitFor(t, 3*time.Second, func() bool { return h.hub.Stats().Subscriptions == 0 })
	goroutines(t, before, 3*time.Second)
	// And the server closed its end of every socket: none is left in
	// CLOSE_WAIT, waiting for the GC to close it.
	_, port, _ := strings.Cut(strings.TrimPrefix(h.srv.URL, "http://"), ":")
	waitFor(t, 3*time.Second, func() bool { return closeWait(t, port) == 0 })
}

// closeWait counts this process's TCP sockets on local port that the peer
// closed and this side did not.
func closeWait(t testing.TB, port string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/net/tcp")
	if err != nil {
		t.Skip("no /proc/self/net/tcp")
	}
	p, _ := strconv.Atoi(port)
	local := fmt.Sprintf(":%04X", p)
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && strings.HasSuffix(f[1], local) && f[3] == "08" {
			n++
		}
	}
	return n
}

func ptr[T any](v T) *T { return &v }

// One change watched by many subscribers with the same selection is
// rendered once; a different selection is rendered once more. Everyone
// gets the same bytes.
func TestChangeIsRenderedOncePerSelection(t *testing.T) {
	var renders atomic.Int64
	hook := func(ctx context.Context, next gqlgraphql.Resolver) (any, error) {
		if fc := gqlgraphql.GetFieldContext(ctx); fc != nil && fc.Object == "Voucher" && fc.Field.Name == "status" {
			renders.Add(1)
		}
		return next(ctx)
	}
	h := newHarness(t, "sqlite3", harnessOptions{graph: graph.WithFieldHook(graph.Options{}, hook)})
	payer := h.device()
	ses, payee := h.session(payer)
	const same = `subscription($s: ID) { voucherUpdated(sessionId: $s) { id status version } }`
	// The same selection written differently (a fragment, another order of
	// the operation's text) still shares.
	const sameViaFragment = `subscription W($s: ID) { voucherUpdated(sessionId: $s) { ...F } } fragment F on Voucher { id status version }`
	const other = `subscription($s: ID) { voucherUpdated(sessionId: $s) { id status } }`
	var subs []*wsClient
	for i := 0; i < 10; i++ {
		c := dialWS(t, h.ws, protocols[i%2])
		c.init(payer.token)
		q := same
		if i%3 == 0 {
			q = sameViaFragment
		}
		c.subscribe("s", q, map[string]any{"s": ses.ID})
		subs = append(subs, c)
	}
	odd := dialWS(t, h.ws, transportWS)
	odd.init(payer.token)
	odd.subscribe("s", other, map[string]any{"s": ses.ID})
	waitFor(t, 10*time.Second, func() bool { return h.hub.Stats().Subscriptions == 11 })

	v := h.reserve(payee, ses.Code, nil)
	var first []byte
	for _, c := range subs {
		m := c.next(3 * time.Second)
		if m.Type != c.dataType() {
			t.Fatalf("got %s %s", m.Type, m.Payload)
		}
		if first == nil {
			first = m.Payload
		} else if string(m.Payload) != string(first) {
			t.Fatalf("subscribers got different bytes:\n%s\n%s", first, m.Payload)
		}
	}
	var ev struct{ VoucherUpdated struct{ ID, Status string } }
	odd.result("s", 3*time.Second, &ev)
	if ev.VoucherUpdated.ID != v.ID {
		t.Fatalf("other selection got %+v", ev)
	}
	if n := renders.Load(); n != 2 {
		t.Fatalf("the change was rendered %d times for 11 subscribers with 2 selections, want 2", n)
	}
}
