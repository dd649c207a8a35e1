package session_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent/vouchersession"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/session"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/view"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func as(kind auth.Kind, id string) context.Context {
	return auth.WithPrincipal(context.Background(), &auth.Principal{Kind: kind, ID: id})
}

func TestSessionLifecycle(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		now := time.Now().UTC()
		var mu sync.Mutex
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		svc := session.NewService(db, 10*time.Minute, clock)
		payer := as(auth.KindDevice, "dev_01aaaaaaaaaaaaaaaaaaaaaaaa")
		other := as(auth.KindUser, "usr_01bbbbbbbbbbbbbbbbbbbbbbbb")

		if _, err := svc.Create(context.Background()); apperr.CodeOf(err) != apperr.Unauthorized {
			t.Fatalf("anonymous create: %v", err)
		}
		if _, err := svc.Create(as(auth.KindResource, "ses_01cccccccccccccccccccccccc")); apperr.CodeOf(err) != apperr.Forbidden {
			t.Fatalf("resource create: %v", err)
		}
		s, err := svc.Create(payer)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := session.NormalizeCode(s.Code); !ok || s.Code != strings.ToUpper(s.Code) || strings.ContainsAny(s.Code, "ILOU") {
			t.Fatalf("bad code %q", s.Code)
		}
		if got := s.ExpiresAt.Sub(s.CreatedAt); got != 10*time.Minute {
			t.Fatalf("lifetime %v", got)
		}
		rv := view.OfSession(s)
		if rv.Status != "ACTIVE" || rv.ID != s.ID {
			t.Fatalf("view %+v", rv)
		}

		// Only the owner sees it; anyone else gets not_found.
		if _, err := svc.Get(other, s.ID); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("stranger get: %v", err)
		}
		if _, err := svc.Close(other, s.ID); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("stranger close: %v", err)
		}
		if live, err := svc.Live(context.Background(), strings.ToLower(s.Code)); err != nil || live.ID != s.ID {
			t.Fatalf("live lookup: %v", err)
		}

		// Malformed and unknown codes.
		if _, err := svc.Live(context.Background(), "ABC"); apperr.CodeOf(err) != apperr.ValidationFailed {
			t.Fatalf("malformed: %v", err)
		}
		if _, err := svc.Live(context.Background(), "ILLOUU"); apperr.CodeOf(err) != apperr.ValidationFailed {
			t.Fatalf("outside alphabet: %v", err)
		}
		unknown := "000000"
		if s.Code == unknown {
			unknown = "000001"
		}
		if _, err := svc.Live(context.Background(), unknown); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("unknown: %v", err)
		}

		// Expiry shows at once on reads, before any sweep.
		mu.Lock()
		now = s.ExpiresAt
		mu.Unlock()
		got, err := svc.Get(payer, s.ID)
		if err != nil || got.Status != vouchersession.StatusEXPIRED {
			t.Fatalf("expired read: %v %v", err, got)
		}
		if _, err := svc.Live(context.Background(), s.Code); apperr.CodeOf(err) != apperr.InvalidCode {
			t.Fatalf("expired live: %v", err)
		}
		n, err := svc.SweepExpired(context.Background())
		if err != nil || n != 1 {
			t.Fatalf("sweep: %d %v", n, err)
		}
		raw, err := db.VoucherSession.Get(context.Background(), s.ID)
		if err != nil || raw.LiveCode != nil {
			t.Fatalf("sweep must free the code: %v %+v", err, raw)
		}

		// Close: code stops working at once; closing again is harmless.
		mu.Lock()
		now = time.Now().UTC()
		mu.Unlock()
		s2, err := svc.Create(payer)
		if err != nil {
			t.Fatal(err)
		}
		closed, err := svc.Close(payer, s2.ID)
		if err != nil || closed.Status != vouchersession.StatusCLOSED {
			t.Fatalf("close: %v %+v", err, closed)
		}
		if _, err := svc.Live(context.Background(), s2.Code); apperr.CodeOf(err) != apperr.InvalidCode {
			t.Fatalf("closed live: %v", err)
		}
		if again, err := svc.Close(payer, s2.ID); err != nil || again.Status != vouchersession.StatusCLOSED {
			t.Fatalf("close twice: %v", err)
		}
	})
}

// Many payers opening sessions at once all get distinct live codes.
func TestConcurrentCodesAreUnique(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		svc := session.NewService(db, 10*time.Minute, nil)
		var wg sync.WaitGroup
		codes := make(chan string, 40)
		for i := 0; i < 40; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := svc.Create(as(auth.KindDevice, "dev_01aaaaaaaaaaaaaaaaaaaaaaaa"))
				if err != nil {
					t.Error(err)
					return
				}
				codes <- s.Code
			}()
		}
		wg.Wait()
		close(codes)
		seen := map[string]bool{}
		for c := range codes {
			if seen[c] {
				t.Fatalf("duplicate live code %s", c)
			}
			seen[c] = true
		}
		if len(seen) != 40 {
			t.Fatalf("created %d sessions", len(seen))
		}
	})
}

func TestCodeAlphabet(t *testing.T) {
	for i := 0; i < 1000; i++ {
		c, err := session.NewCode()
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := session.NormalizeCode(c); !ok || n != c {
			t.Fatalf("code %q not in its own alphabet", c)
		}
	}
}

// fixedVerifier proves one principal for every token.
type fixedVerifier struct{ p *auth.Principal }

func (f fixedVerifier) Verify(context.Context, string) (*auth.Principal, error) { return f.p, nil }

// A resource token's session, once found live, is answered from memory
// (a change the service did not make, written straight to the table, is
// not seen: no statement ran), until the session is closed through the
// service (at once), or its expiry passes; Recheck always reads the
// database.
func TestResourceTokensSessionIsRememberedUntilClosedOrExpired(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		now := time.Now().UTC()
		var mu sync.Mutex
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		svc := session.NewService(db, 10*time.Minute, clock)
		payer := as(auth.KindDevice, "dev_01aaaaaaaaaaaaaaaaaaaaaaaa")
		ctx := context.Background()
		open := func() (string, auth.Verifier, interface {
			Recheck(context.Context, *auth.Principal) error
		}) {
			s, err := svc.Create(payer)
			if err != nil {
				t.Fatal(err)
			}
			v := svc.Verifier(fixedVerifier{&auth.Principal{Kind: auth.KindResource, ID: s.ID}})
			return s.ID, v, v.(interface {
				Recheck(context.Context, *auth.Principal) error
			})
		}

		id, v, rc := open()
		if _, err := v.Verify(ctx, "t"); err != nil {
			t.Fatalf("live session: %v", err)
		}
		// Behind the service's back: the remembered answer stands, so the
		// verifier ran no statement; Recheck reads the table.
		if err := db.VoucherSession.UpdateOneID(id).SetStatus(vouchersession.StatusCLOSED).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(ctx, "t"); err != nil {
			t.Fatalf("remembered session: %v", err)
		}
		if err := rc.Recheck(ctx, &auth.Principal{Kind: auth.KindResource, ID: id}); apperr.CodeOf(err) != apperr.Unauthorized {
			t.Fatalf("Recheck of a closed session: %v", err)
		}

		// Closed through the service: refused at the next request.
		id, v, _ = open()
		if _, err := v.Verify(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Close(payer, id); err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(ctx, "t"); apperr.CodeOf(err) != apperr.Unauthorized {
			t.Fatalf("after close: %v", err)
		}

		// Expired: refused once the clock passes its expiry, remembered or not.
		_, v, _ = open()
		if _, err := v.Verify(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		now = now.Add(10 * time.Minute)
		mu.Unlock()
		if _, err := v.Verify(ctx, "t"); apperr.CodeOf(err) != apperr.Unauthorized {
			t.Fatalf("after expiry: %v", err)
		}

		// Other tokens pass through without a look at sessions.
		u := svc.Verifier(fixedVerifier{&auth.Principal{Kind: auth.KindUser, ID: "usr_01bbbbbbbbbbbbbbbbbbbbbbbb"}})
		if _, err := u.Verify(ctx, "t"); err != nil {
			t.Fatal(err)
		}
	})
}
