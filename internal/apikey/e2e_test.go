package apikey_test

// End-to-end tests: the real voucherd binary (testsupport/testserver), on
// SQLite and PostgreSQL, used as a business's dashboard and its server
// would use it.

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var keyShape = regexp.MustCompile(`^vsk_[A-Za-z0-9_-]{43}$`)

// shop is a running server with a business, its OWNER and a MEMBER.
type shop struct {
	srv           *testserver.Server
	owner, member testserver.Identity
	biz           string
}

func openShop(t *testing.T, srv *testserver.Server) *shop {
	t.Helper()
	s := &shop{srv: srv, owner: srv.User(t), member: srv.User(t)}
	r := srv.Do(t, "POST", "/api/v1/businesses/create-business", s.owner.Token, map[string]any{"name": "Shop"})
	if r.Status != 200 {
		t.Fatalf("create-business: %d %s", r.Status, r.Body)
	}
	s.biz = r.Map(t)["id"].(string)
	if r := srv.Do(t, "POST", s.path("/users/add-user"), s.owner.Token, map[string]any{"email": s.member.Email, "role": "MEMBER"}); r.Status != 200 {
		t.Fatalf("add-user: %d %s", r.Status, r.Body)
	}
	return s
}

func (s *shop) path(p string) string { return "/api/v1/businesses/" + s.biz + p }

// key creates a key with scopes and returns its id and key.
func (s *shop) key(t *testing.T, name string, scopes ...string) (string, string) {
	t.Helper()
	r := s.srv.Do(t, "POST", s.path("/api-keys/create-api-key"), s.owner.Token, map[string]any{"name": name, "scopes": scopes})
	if r.Status != 200 {
		t.Fatalf("create-api-key: %d %s", r.Status, r.Body)
	}
	m := r.Map(t)
	return m["id"].(string), m["key"].(string)
}

func (s *shop) list(t *testing.T, token string) []map[string]any {
	t.Helper()
	var out []map[string]any
	r := s.srv.Do(t, "GET", s.path("/api-keys"), token, nil)
	if r.Status != 200 {
		t.Fatalf("api-keys: %d %s", r.Status, r.Body)
	}
	r.JSON(t, &out)
	return out
}

func TestE2EKeyManagement(t *testing.T) {
	t.Parallel()
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			s := openShop(t, testserver.Start(t, testserver.Options{Dialect: dialect}))

			r := s.srv.Do(t, "POST", s.path("/api-keys/create-api-key"), s.owner.Token, map[string]any{"name": "Orders", "scopes": []string{"vouchers:read", "events:read"}})
			if r.Status != 200 {
				t.Fatalf("create-api-key: %d %s", r.Status, r.Body)
			}
			created := r.Map(t)
			key, _ := created["key"].(string)
			if !keyShape.MatchString(key) || !strings.HasPrefix(created["id"].(string), "bak_") || created["name"] != "Orders" ||
				fmt.Sprint(created["scopes"]) != "[vouchers:read events:read]" || created["lastUsedAt"] != nil {
				t.Fatalf("created %v", created)
			}

			// Listed to every member, never with the key.
			for _, who := range []testserver.Identity{s.owner, s.member} {
				l := s.list(t, who.Token)
				if len(l) != 1 || l[0]["id"] != created["id"] || l[0]["key"] != nil || strings.Contains(fmt.Sprint(l), key) {
					t.Fatalf("list: %v", l)
				}
			}

			// Who may do what.
			stranger := s.srv.User(t)
			for _, c := range []struct {
				who          testserver.Identity
				method, path string
				want         int
			}{
				{s.member, "POST", "/api-keys/create-api-key", 403},
				{stranger, "POST", "/api-keys/create-api-key", 404},
				{stranger, "GET", "/api-keys", 404},
				{s.member, "POST", "/api-keys/" + created["id"].(string) + "/revoke-api-key", 403},
				{stranger, "POST", "/api-keys/" + created["id"].(string) + "/revoke-api-key", 404},
				{s.owner, "POST", "/api-keys/bak_nope/revoke-api-key", 404},
			} {
				var body any
				if c.method == "POST" {
					body = map[string]any{"name": "x", "scopes": []string{"events:read"}}
					if strings.HasSuffix(c.path, "revoke-api-key") {
						body = map[string]any{}
					}
				}
				if r := s.srv.Do(t, c.method, s.path(c.path), c.who.Token, body); r.Status != c.want {
					t.Errorf("%s %s: %d %s, want %d", c.method, c.path, r.Status, r.Body, c.want)
				}
			}
			// Key management is never open to a key, whatever it holds.
			all := []string{"vouchers:read", "checkouts:write", "widgets:read", "widgets:write", "webhooks:read", "webhooks:write", "events:read", "business:read"}
			_, strong := s.key(t, "everything", all...)
			for _, c := range [][2]string{{"GET", "/api-keys"}, {"POST", "/api-keys/create-api-key"}, {"POST", "/api-keys/" + created["id"].(string) + "/revoke-api-key"}} {
				if r := s.srv.Do(t, c[0], s.path(c[1]), strong, map[string]any{"name": "x", "scopes": []string{"events:read"}}); r.Status != 403 {
					t.Errorf("a key on %s %s: %d %s", c[0], c[1], r.Status, r.Body)
				}
			}

			// Bad bodies store nothing.
			for _, body := range []map[string]any{
				{"scopes": []string{"events:read"}},
				{"name": "", "scopes": []string{"events:read"}},
				{"name": strings.Repeat("n", 129), "scopes": []string{"events:read"}},
				{"name": "x"},
				{"name": "x", "scopes": []string{}},
				{"name": "x", "scopes": []string{"admin"}},
				{"name": "x", "scopes": []string{"events:read", "events:read"}},
				{"name": "x", "scopes": []string{"events:read"}, "extra": true},
			} {
				if r := s.srv.Do(t, "POST", s.path("/api-keys/create-api-key"), s.owner.Token, body); r.Status != 400 || !strings.Contains(string(r.Body), "validation_failed") {
					t.Errorf("create %v: %d %s", body, r.Status, r.Body)
				}
			}
			if n := len(s.list(t, s.owner.Token)); n != 2 {
				t.Fatalf("%d keys after refused creates, want 2", n)
			}

			// 20 live keys at most; a revoked one frees its place.
			for i := 2; i < 20; i++ {
				s.key(t, fmt.Sprintf("k%d", i), "events:read")
			}
			r = s.srv.Do(t, "POST", s.path("/api-keys/create-api-key"), s.owner.Token, map[string]any{"name": "21st", "scopes": []string{"events:read"}})
			if r.Status != 400 || !strings.Contains(string(r.Body), "limit_exceeded") {
				t.Fatalf("21st key: %d %s", r.Status, r.Body)
			}
			r = s.srv.Do(t, "POST", s.path("/api-keys/"+created["id"].(string)+"/revoke-api-key"), s.owner.Token, map[string]any{})
			if r.Status != 200 || r.Map(t)["revokedAt"] == nil || r.Map(t)["key"] != nil {
				t.Fatalf("revoke: %d %s", r.Status, r.Body)
			}
			if r := s.srv.Do(t, "POST", s.path("/api-keys/"+created["id"].(string)+"/revoke-api-key"), s.owner.Token, map[string]any{}); r.Status != 200 {
				t.Fatalf("revoking again: %d %s", r.Status, r.Body)
			}
			for _, k := range s.list(t, s.owner.Token) {
				if k["id"] == created["id"] {
					t.Fatal("a revoked key is listed")
				}
			}
			s.key(t, "20th again", "events:read")

			// GraphQL twins.
			g := s.srv.GraphQL(t, s.owner.Token, `mutation($b: ID!) { createApiKey(businessId: $b, input: {name: "gql", scopes: ["webhooks:read"]}) { id name scopes createdAt lastUsedAt key } }`, map[string]any{"b": s.biz})
			if g.ErrorCode() != "limit_exceeded" {
				t.Fatalf("GraphQL 21st key: %s %v", g.Data, g.Errors)
			}
			l := s.list(t, s.owner.Token)
			g = s.srv.GraphQL(t, s.owner.Token, `mutation($b: ID!, $k: ID!) { revokeApiKey(businessId: $b, id: $k) { id revokedAt } }`, map[string]any{"b": s.biz, "k": l[0]["id"]})
			if err := g.Err(); err != nil || !strings.Contains(string(g.Data), `"revokedAt":"`) {
				t.Fatalf("revokeApiKey: %s %v", g.Data, err)
			}
			g = s.srv.GraphQL(t, s.owner.Token, `mutation($b: ID!) { createApiKey(businessId: $b, input: {name: "gql", scopes: ["webhooks:read"]}) { id name scopes createdAt lastUsedAt key } }`, map[string]any{"b": s.biz})
			var gk struct {
				CreateAPIKey map[string]any `json:"createApiKey"`
			}
			if err := g.Err(); err != nil {
				t.Fatal(err)
			}
			_ = json.Unmarshal(g.Data, &gk)
			if !keyShape.MatchString(fmt.Sprint(gk.CreateAPIKey["key"])) || gk.CreateAPIKey["lastUsedAt"] != nil || fmt.Sprint(gk.CreateAPIKey["scopes"]) != "[webhooks:read]" {
				t.Fatalf("createApiKey: %s", g.Data)
			}
			g = s.srv.GraphQL(t, s.member.Token, `query($b: ID!) { business(id: $b) { apiKeys { id name scopes } } }`, map[string]any{"b": s.biz})
			if err := g.Err(); err != nil || strings.Count(string(g.Data), `"id":"bak_`) != 20 {
				t.Fatalf("Business.apiKeys: %s %v", g.Data, err)
			}
			g = s.srv.GraphQL(t, s.member.Token, `mutation($b: ID!) { createApiKey(businessId: $b, input: {name: "m", scopes: ["events:read"]}) { id } }`, map[string]any{"b": s.biz})
			if g.ErrorCode() != "forbidden" {
				t.Fatalf("a MEMBER's createApiKey: %v", g.Errors)
			}

			// No key in any log line.
			if logs := s.srv.Logs(); strings.Contains(logs, key) || strings.Contains(logs, strong) || strings.Contains(logs, "vsk_") {
				t.Fatal("a key is in the logs")
			}
		})
	}
}
