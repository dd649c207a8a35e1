package rest_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// exactly fails unless m has exactly keys.
func exactly(t *testing.T, what string, m map[string]any, keys ...string) {
	t.Helper()
	if len(m) != len(keys) {
		t.Fatalf("%s: keys of %v, want exactly %v", what, m, keys)
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Fatalf("%s: missing %q in %v", what, k, m)
		}
	}
}

// apiTime fails unless v is an API timestamp (RFC 3339 UTC, milliseconds).
func apiTime(t *testing.T, v any) time.Time {
	t.Helper()
	s, _ := v.(string)
	ts, err := time.Parse("2006-01-02T15:04:05.000Z", s)
	if err != nil {
		t.Fatalf("timestamp %v: %v", v, err)
	}
	return ts
}

// wantEmpty fails unless r is "200, empty body".
func wantEmpty(t *testing.T, what string, r *testserver.Response) {
	t.Helper()
	if r.Status != http.StatusOK || len(r.Body) != 0 || r.Header.Get("Content-Length") != "0" {
		t.Fatalf("%s: want 200 with an empty body, got %d %q (Content-Length %q)", what, r.Status, r.Body, r.Header.Get("Content-Length"))
	}
}

// wantError fails unless r is the error body with status and code.
func wantError(t *testing.T, what string, r *testserver.Response, status int, code string) {
	t.Helper()
	if r.Status != status || r.Code() != code {
		t.Fatalf("%s: want %d %s, got %d %s", what, status, code, r.Status, r.Body)
	}
}

func list(t *testing.T, r *testserver.Response) []map[string]any {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("list: %d %s", r.Status, r.Body)
	}
	var out []map[string]any
	r.JSON(t, &out)
	return out
}

// The check, over HTTP against the binary on both databases: two
// users, one business; the owner adds the other as MEMBER, who reads but
// cannot update; a stranger gets 404 everywhere; statuses move as documented
// and every response has the spec's shape.
func TestBusinessesEndToEnd(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			srv := testserver.Start(t, testserver.Options{Dialect: dialect})
			owner, member, stranger := srv.User(t), srv.User(t), srv.User(t)
			device := srv.Device(t)
			_, code := srv.Session(t, device)
			resource := srv.Resource(t, code)

			// Create: id, name, status, createdAt.
			r := srv.Do(t, "POST", "/api/v1/businesses/create-business", owner.Token, map[string]any{"name": "Acme Coffee"})
			if r.Status != http.StatusOK {
				t.Fatalf("create: %d %s", r.Status, r.Body)
			}
			biz := r.Map(t)
			exactly(t, "create", biz, "id", "name", "status", "createdAt")
			id, _ := biz["id"].(string)
			if !strings.HasPrefix(id, "biz_") || biz["name"] != "Acme Coffee" || biz["status"] != "ACTIVE" {
				t.Fatalf("create: %v", biz)
			}
			created := apiTime(t, biz["createdAt"])
			base := "/api/v1/businesses/" + id

			// List own, with and without the trailing slash: a bare array.
			for _, path := range []string{"/api/v1/businesses/", "/api/v1/businesses"} {
				rows := list(t, srv.Do(t, "GET", path, owner.Token, nil))
				if len(rows) != 1 || rows[0]["id"] != id {
					t.Fatalf("GET %s: %v", path, rows)
				}
				exactly(t, "list own", rows[0], "id", "name", "status", "createdAt")
			}
			if rows := list(t, srv.Do(t, "GET", "/api/v1/businesses/", member.Token, nil)); len(rows) != 0 {
				t.Fatalf("not yet a member, lists %v", rows)
			}

			// Get: + updatedAt.
			r = srv.Do(t, "GET", base, owner.Token, nil)
			got := r.Map(t)
			exactly(t, "get", got, "id", "name", "status", "createdAt", "updatedAt")
			if got["id"] != id || !apiTime(t, got["createdAt"]).Equal(created) {
				t.Fatalf("get: %v", got)
			}
			apiTime(t, got["updatedAt"])

			// The owner adds the other user as MEMBER.
			r = srv.Do(t, "POST", base+"/users/add-user", owner.Token, map[string]any{"email": member.Email, "role": "MEMBER"})
			if r.Status != http.StatusOK {
				t.Fatalf("add-user: %d %s", r.Status, r.Body)
			}
			membership := r.Map(t)
			exactly(t, "add-user", membership, "id", "userId", "role", "status", "createdAt")
			if membership["userId"] != member.ID || membership["role"] != "MEMBER" || membership["status"] != "ACTIVE" {
				t.Fatalf("add-user: %v", membership)
			}
			memberID, _ := membership["id"].(string)
			if !strings.HasPrefix(memberID, "bzu_") {
				t.Fatalf("membership id %q", memberID)
			}
			wantError(t, "add-user again", srv.Do(t, "POST", base+"/users/add-user", owner.Token, map[string]any{"email": member.Email, "role": "ADMIN"}), 400, "already_exists")
			wantError(t, "add-user unknown email", srv.Do(t, "POST", base+"/users/add-user", owner.Token, map[string]any{"email": "nobody@example.com", "role": "MEMBER"}), 404, "not_found")

			// List users: both memberships, exact shape.
			users := list(t, srv.Do(t, "GET", base+"/users", member.Token, nil))
			if len(users) != 2 {
				t.Fatalf("users: %v", users)
			}
			var ownerMembership string
			for _, u := range users {
				exactly(t, "users", u, "id", "userId", "role", "status", "createdAt")
				apiTime(t, u["createdAt"])
				if u["userId"] == owner.ID {
					if u["role"] != "OWNER" || u["status"] != "ACTIVE" {
						t.Fatalf("creator's membership: %v", u)
					}
					ownerMembership, _ = u["id"].(string)
				}
			}
			if users[0]["userId"] != owner.ID {
				t.Fatalf("users are listed oldest first: %v", users)
			}

			// The member reads but cannot write.
			if r := srv.Do(t, "GET", base, member.Token, nil); r.Status != http.StatusOK {
				t.Fatalf("member get: %d %s", r.Status, r.Body)
			}
			if rows := list(t, srv.Do(t, "GET", "/api/v1/businesses/", member.Token, nil)); len(rows) != 1 || rows[0]["id"] != id {
				t.Fatalf("member's list: %v", rows)
			}
			writes := []struct {
				path string
				body any
			}{
				{base + "/update-business", map[string]any{"name": "Mine now"}},
				{base + "/update-status", map[string]any{"status": "INACTIVE"}},
				{base + "/users/add-user", map[string]any{"email": stranger.Email, "role": "MEMBER"}},
				{base + "/users/" + ownerMembership + "/update-status", map[string]any{"status": "INACTIVE"}},
			}
			for _, w := range writes {
				wantError(t, "member POST "+w.path, srv.Do(t, "POST", w.path, member.Token, w.body), 403, "forbidden")
			}

			// A stranger gets 404 on every business route; device and
			// resource tokens 403; no token 401.
			routes := []struct {
				method, path string
				body         any
			}{
				{"GET", base, nil},
				{"GET", base + "/users", nil},
				{"POST", base + "/update-business", map[string]any{"name": "x"}},
				{"POST", base + "/update-status", map[string]any{"status": "INACTIVE"}},
				{"POST", base + "/users/add-user", map[string]any{"email": stranger.Email, "role": "MEMBER"}},
				{"POST", base + "/users/" + memberID + "/update-status", map[string]any{"status": "INACTIVE"}},
			}
			for _, rt := range routes {
				what := rt.method + " " + rt.path
				wantError(t, "stranger "+what, srv.Do(t, rt.method, rt.path, stranger.Token, rt.body), 404, "not_found")
				wantError(t, "device "+what, srv.Do(t, rt.method, rt.path, device.Token, rt.body), 403, "forbidden")
				wantError(t, "resource "+what, srv.Do(t, rt.method, rt.path, resource.Token, rt.body), 403, "forbidden")
				wantError(t, "anonymous "+what, srv.Do(t, rt.method, rt.path, "", rt.body), 401, "unauthorized")
			}
			for _, rt := range []struct{ method, path string }{{"POST", "/api/v1/businesses/create-business"}, {"GET", "/api/v1/businesses/"}} {
				wantError(t, "device "+rt.path, srv.Do(t, rt.method, rt.path, device.Token, map[string]any{"name": "x"}), 403, "forbidden")
				wantError(t, "resource "+rt.path, srv.Do(t, rt.method, rt.path, resource.Token, map[string]any{"name": "x"}), 403, "forbidden")
				wantError(t, "anonymous "+rt.path, srv.Do(t, rt.method, rt.path, "", map[string]any{"name": "x"}), 401, "unauthorized")
			}
			if rows := list(t, srv.Do(t, "GET", "/api/v1/businesses", stranger.Token, nil)); len(rows) != 0 {
				t.Fatalf("stranger's list: %v", rows)
			}

			// Bodies: bounds and strict decoding, before anything changes.
			long := strings.Repeat("é", 129)
			for _, b := range []struct {
				path, body, field string
			}{
				{"/api/v1/businesses/create-business", `{}`, "name"},
				{"/api/v1/businesses/create-business", `{"name":""}`, "name"},
				{"/api/v1/businesses/create-business", `{"name":"` + long + `"}`, "name"},
				{"/api/v1/businesses/create-business", `{"name":"a","extra":1}`, "extra"},
				{"/api/v1/businesses/create-business", `{"name":7}`, "name"},
				{base + "/update-business", `{"name":"` + long + `"}`, "name"},
				{base + "/update-status", `{"status":"DELETED"}`, "status"},
				{base + "/update-status", `{}`, "status"},
				{base + "/users/add-user", `{"email":"` + stranger.Email + `","role":"VIEWER"}`, "role"},
				{base + "/users/" + memberID + "/update-status", `{"status":"active"}`, "status"},
			} {
				r := srv.Do(t, "POST", b.path, owner.Token, b.body)
				wantError(t, "POST "+b.path+" "+b.body, r, 400, "validation_failed")
				if !strings.Contains(string(r.Body), `"field":"`+b.field+`"`) {
					t.Fatalf("POST %s %s: details should name %s: %s", b.path, b.body, b.field, r.Body)
				}
			}
			wantError(t, "bad JSON", srv.Do(t, "POST", base+"/update-business", owner.Token, `{"name":`), 400, "validation_failed")
			r = srv.Do(t, "POST", "/api/v1/businesses/create-business", owner.Token, map[string]any{"name": strings.Repeat("é", 128)})
			if r.Status != http.StatusOK {
				t.Fatalf("128-character name: %d %s", r.Status, r.Body)
			}

			// Update: 200, empty body; the change shows on get.
			time.Sleep(2 * time.Millisecond) // updatedAt has millisecond resolution
			wantEmpty(t, "update-business", srv.Do(t, "POST", base+"/update-business", owner.Token, map[string]any{"name": "Acme Roasters"}))
			got = srv.Do(t, "GET", base, member.Token, nil).Map(t)
			if got["name"] != "Acme Roasters" || !apiTime(t, got["updatedAt"]).After(created) {
				t.Fatalf("after update: %v", got)
			}
			wantEmpty(t, "update-business without a name", srv.Do(t, "POST", base+"/update-business", owner.Token, map[string]any{}))

			// Status: INACTIVE keeps reads and refuses writes; only the
			// owner's update-status brings it back.
			wantEmpty(t, "deactivate", srv.Do(t, "POST", base+"/update-status", owner.Token, map[string]any{"status": "INACTIVE"}))
			if got := srv.Do(t, "GET", base, member.Token, nil).Map(t); got["status"] != "INACTIVE" {
				t.Fatalf("inactive business read: %v", got)
			}
			if rows := list(t, srv.Do(t, "GET", base+"/users", member.Token, nil)); len(rows) != 2 {
				t.Fatalf("inactive business users: %v", rows)
			}
			wantError(t, "update inactive", srv.Do(t, "POST", base+"/update-business", owner.Token, map[string]any{"name": "x"}), 400, "business_inactive")
			wantError(t, "add-user inactive", srv.Do(t, "POST", base+"/users/add-user", owner.Token, map[string]any{"email": stranger.Email, "role": "MEMBER"}), 400, "business_inactive")
			wantError(t, "member status inactive", srv.Do(t, "POST", base+"/users/"+memberID+"/update-status", owner.Token, map[string]any{"status": "INACTIVE"}), 400, "business_inactive")
			wantEmpty(t, "reactivate", srv.Do(t, "POST", base+"/update-status", owner.Token, map[string]any{"status": "ACTIVE"}))
			if got := srv.Do(t, "GET", base, owner.Token, nil).Map(t); got["status"] != "ACTIVE" {
				t.Fatalf("reactivated: %v", got)
			}

			// Membership status: the last owner stays; a deactivated member
			// is a stranger (404) until reactivated.
			wantError(t, "last owner", srv.Do(t, "POST", base+"/users/"+ownerMembership+"/update-status", owner.Token, map[string]any{"status": "INACTIVE"}), 400, "last_owner")
			wantEmpty(t, "deactivate member", srv.Do(t, "POST", base+"/users/"+memberID+"/update-status", owner.Token, map[string]any{"status": "INACTIVE"}))
			wantError(t, "deactivated member reads", srv.Do(t, "GET", base, member.Token, nil), 404, "not_found")
			if rows := list(t, srv.Do(t, "GET", "/api/v1/businesses/", member.Token, nil)); len(rows) != 0 {
				t.Fatalf("deactivated member's list: %v", rows)
			}
			for _, u := range list(t, srv.Do(t, "GET", base+"/users", owner.Token, nil)) {
				if u["id"] == memberID && u["status"] != "INACTIVE" {
					t.Fatalf("deactivated membership: %v", u)
				}
			}
			wantError(t, "re-add inactive member", srv.Do(t, "POST", base+"/users/add-user", owner.Token, map[string]any{"email": member.Email, "role": "MEMBER"}), 400, "already_exists")
			wantEmpty(t, "reactivate member", srv.Do(t, "POST", base+"/users/"+memberID+"/update-status", owner.Token, map[string]any{"status": "ACTIVE"}))
			if r := srv.Do(t, "GET", base, member.Token, nil); r.Status != http.StatusOK {
				t.Fatalf("reactivated member reads: %d %s", r.Status, r.Body)
			}
			wantError(t, "unknown membership", srv.Do(t, "POST", base+"/users/bzu_nope/update-status", owner.Token, map[string]any{"status": "INACTIVE"}), 404, "not_found")
			wantError(t, "unknown business", srv.Do(t, "GET", "/api/v1/businesses/biz_nope", owner.Token, nil), 404, "not_found")

			// A wrong method on a business route is a JSON 405, not a 404.
			r = srv.Do(t, "DELETE", base, owner.Token, nil)
			wantError(t, "DELETE business", r, 405, "method_not_allowed")
		})
	}
}

// ADMINs manage members and the business but not OWNERs or the status.
func TestBusinessAdminEndToEnd(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			testBusinessAdmin(t, testserver.Start(t, testserver.Options{Dialect: dialect}))
		})
	}
}

func testBusinessAdmin(t *testing.T, srv *testserver.Server) {
	owner, admin, other := srv.User(t), srv.User(t), srv.User(t)
	r := srv.Do(t, "POST", "/api/v1/businesses/create-business", owner.Token, map[string]any{"name": "Shop"})
	id, _ := r.Map(t)["id"].(string)
	base := "/api/v1/businesses/" + id
	r = srv.Do(t, "POST", base+"/users/add-user", owner.Token, map[string]any{"email": admin.Email, "role": "ADMIN"})
	if r.Status != http.StatusOK {
		t.Fatalf("add admin: %d %s", r.Status, r.Body)
	}
	var ownerMembership string
	for _, u := range list(t, srv.Do(t, "GET", base+"/users", admin.Token, nil)) {
		if u["userId"] == owner.ID {
			ownerMembership = fmt.Sprint(u["id"])
		}
	}
	wantEmpty(t, "admin renames", srv.Do(t, "POST", base+"/update-business", admin.Token, map[string]any{"name": "Shop 2"}))
	wantError(t, "admin sets status", srv.Do(t, "POST", base+"/update-status", admin.Token, map[string]any{"status": "INACTIVE"}), 403, "forbidden")
	wantError(t, "admin deactivates owner", srv.Do(t, "POST", base+"/users/"+ownerMembership+"/update-status", admin.Token, map[string]any{"status": "INACTIVE"}), 403, "forbidden")
	wantError(t, "admin adds owner", srv.Do(t, "POST", base+"/users/add-user", admin.Token, map[string]any{"email": other.Email, "role": "OWNER"}), 403, "forbidden")
	r = srv.Do(t, "POST", base+"/users/add-user", admin.Token, map[string]any{"email": other.Email, "role": "MEMBER"})
	if r.Status != http.StatusOK {
		t.Fatalf("admin adds member: %d %s", r.Status, r.Body)
	}
	otherMembership := fmt.Sprint(r.Map(t)["id"])
	wantEmpty(t, "admin deactivates member", srv.Do(t, "POST", base+"/users/"+otherMembership+"/update-status", admin.Token, map[string]any{"status": "INACTIVE"}))
}
