package rest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

const createSession = "/api/v1/vouchers/sessions/create-session"

func withKey(key string) http.Header { return http.Header{"Idempotency-Key": {key}} }

// sessionCount is how many voucher sessions the payer has.
func sessionCount(t *testing.T, srv *testserver.Server, token string) int {
	t.Helper()
	g := srv.GraphQL(t, token, `{ voucherSessions { totalCount } }`, nil)
	var out struct{ VoucherSessions struct{ TotalCount int } }
	if err := json.Unmarshal(g.Data, &out); err != nil || len(g.Errors) > 0 {
		t.Fatalf("voucherSessions: %s %+v", g.Data, g.Errors)
	}
	return out.VoucherSessions.TotalCount
}

func replayed(r *testserver.Response) bool { return r.Header.Get("Idempotent-Replayed") == "true" }

// A wallet retrying a POST with its Idempotency-Key gets the first answer
// back and the work is done once, on both databases.
func TestIdempotencyKey(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			srv := testserver.Start(t, testserver.Options{Dialect: dialect})
			dev := srv.Device(t)

			first := srv.DoWith(t, "POST", createSession, dev.Token, nil, withKey("retry-1"))
			again := srv.DoWith(t, "POST", createSession, dev.Token, nil, withKey("retry-1"))
			if first.Status != 200 || replayed(first) || again.Status != 200 || !replayed(again) || string(again.Body) != string(first.Body) {
				t.Fatalf("replay: %d %v %s / %d %v %s", first.Status, first.Header, first.Body, again.Status, again.Header, again.Body)
			}
			if n := sessionCount(t, srv, dev.Token); n != 1 {
				t.Fatalf("%d sessions after a replayed create, want 1", n)
			}
			// Another body with the same key.
			if r := srv.DoWith(t, "POST", createSession, dev.Token, "{}", withKey("retry-1")); r.Status != 422 || r.Code() != "idempotency_key_reused" {
				t.Fatalf("reused key: %d %s", r.Status, r.Body)
			}
			// Another caller's key of the same name is its own.
			other := srv.Device(t)
			if r := srv.DoWith(t, "POST", createSession, other.Token, nil, withKey("retry-1")); r.Status != 200 || replayed(r) {
				t.Fatalf("another caller's key: %d %v", r.Status, r.Header)
			}
			// Without a key each POST does its work.
			srv.Do(t, "POST", createSession, dev.Token, nil)
			if n := sessionCount(t, srv, dev.Token); n != 2 {
				t.Fatalf("%d sessions, want 2", n)
			}
			// A malformed key changes nothing.
			for _, bad := range []string{strings.Repeat("k", 256), "clé"} {
				if r := srv.DoWith(t, "POST", createSession, dev.Token, nil, withKey(bad)); r.Status != 400 || r.Code() != "validation_failed" {
					t.Fatalf("malformed key: %d %s", r.Status, r.Body)
				}
			}
			if n := sessionCount(t, srv, dev.Token); n != 2 {
				t.Fatalf("%d sessions after malformed keys, want 2", n)
			}
			// A 4xx answer is kept too.
			r := srv.DoWith(t, "POST", "/api/v1/vouchers/sessions/ses_nothing/close-session", dev.Token, nil, withKey("close-1"))
			r2 := srv.DoWith(t, "POST", "/api/v1/vouchers/sessions/ses_nothing/close-session", dev.Token, nil, withKey("close-1"))
			if r.Status != 404 || r2.Status != 404 || !replayed(r2) || r2.Code() != "not_found" {
				t.Fatalf("a 404 replayed: %d / %d %v", r.Status, r2.Status, r2.Header)
			}
			// A refused token stores nothing: it is refused again, not replayed.
			if r := srv.DoWith(t, "POST", createSession, "", nil, withKey("anon")); r.Status != 401 || replayed(r) {
				t.Fatalf("no token: %d %v", r.Status, r.Header)
			}

			// Sign-in without a token is keyed by the client address; its
			// answer (a token) is replayed, and sealed where it is kept.
			creds := map[string]any{"type": "mobile-device", "data": map[string]any{"installationId": dev.InstallationID, "password": dev.Password}}
			in1 := srv.DoWith(t, "POST", "/api/v1/auth/sign-in", "", creds, withKey("sign-in-1"))
			in2 := srv.DoWith(t, "POST", "/api/v1/auth/sign-in", "", creds, withKey("sign-in-1"))
			if in1.Status != 200 || !replayed(in2) || string(in1.Body) != string(in2.Body) {
				t.Fatalf("sign-in replay: %d %s / %d %s", in1.Status, in1.Body, in2.Status, in2.Body)
			}
			var tok struct{ Authorization struct{ Token string } }
			in1.JSON(t, &tok)
			db, err := storage.Open(context.Background(), srv.DatabaseURL, storage.Options{MaxOpenConns: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			rows, err := db.SQL.Query(`SELECT coalesce(body, '') FROM idempotency_keys`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			kept := 0
			for rows.Next() {
				var body string
				if err := rows.Scan(&body); err != nil {
					t.Fatal(err)
				}
				kept++
				if strings.Contains(body, tok.Authorization.Token) || strings.Contains(body, "ses_") {
					t.Fatalf("a kept answer is stored in the clear: %q", body)
				}
			}
			if kept != 4 {
				t.Fatalf("%d kept answers, want 4 (two creates, a close, a sign-in)", kept)
			}
			if strings.Contains(srv.Logs(), "sign-in-1") {
				t.Fatal("an idempotency key reached the logs")
			}

			// Concurrent retries: exactly one does the work.
			before := sessionCount(t, srv, dev.Token)
			answers := race(t, []*testserver.Server{srv}, 12, dev.Token, "race-1")
			if n := sessionCount(t, srv, dev.Token); n != before+1 {
				t.Fatalf("%d sessions created by 12 racing retries, want 1 (%v)", n-before, answers)
			}
		})
	}
}

// race sends n create-session POSTs with one key at once, spread over the
// replicas, and checks each answer is the one session or a conflict.
func race(t *testing.T, srvs []*testserver.Server, n int, token, key string) map[string]int {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		ids   = map[string]bool{}
		count = map[string]int{}
	)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r := srvs[i%len(srvs)].DoWith(t, "POST", createSession, token, nil, withKey(key))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case r.Status == 200:
				var s struct{ ID string }
				_ = json.Unmarshal(r.Body, &s)
				ids[s.ID] = true
				if replayed(r) {
					count["replayed"]++
				} else {
					count["fresh"]++
				}
			case r.Status == 409 && r.Code() == "idempotency_conflict":
				count["conflict"]++
			default:
				t.Errorf("racing retry: %d %s", r.Status, r.Body)
			}
		}()
	}
	close(start)
	wg.Wait()
	if count["fresh"] != 1 || len(ids) != 1 {
		t.Fatalf("racing retries: %v, %d session ids", count, len(ids))
	}
	return count
}

// Two replicas on one PostgreSQL share keys: a retry on the other replica
// is replayed, and racing retries across both do the work once.
func TestIdempotencyAcrossReplicas(t *testing.T) {
	t.Parallel()
	a := testserver.Start(t, testserver.Options{Dialect: storage.Postgres})
	b := testserver.Start(t, testserver.Options{Dialect: storage.Postgres, DatabaseURL: a.DatabaseURL})
	dev := a.Device(t)
	first := a.DoWith(t, "POST", createSession, dev.Token, nil, withKey("replica-1"))
	again := b.DoWith(t, "POST", createSession, dev.Token, nil, withKey("replica-1"))
	if first.Status != 200 || !replayed(again) || string(again.Body) != string(first.Body) {
		t.Fatalf("replay on the other replica: %s / %d %s", first.Body, again.Status, again.Body)
	}
	if r := b.DoWith(t, "POST", createSession, dev.Token, "{}", withKey("replica-1")); r.Status != 422 {
		t.Fatalf("reuse on the other replica: %d %s", r.Status, r.Body)
	}
	race(t, []*testserver.Server{a, b}, 16, dev.Token, "replica-race")
	if n := sessionCount(t, b, dev.Token); n != 2 {
		t.Fatalf("%d sessions, want 2", n)
	}
}
