package apikey_test

import (
	"context"
	"strings"
	"testing"

	"github.com/voucherd/voucherd/ent/businessuser"
	"github.com/voucherd/voucherd/internal/apikey"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func ptr[T any](v T) *T { return &v }

func TestCreateInputValidate(t *testing.T) {
	for _, c := range []struct {
		in apikey.CreateInput
		ok bool
	}{
		{apikey.CreateInput{Name: ptr("server"), Scopes: []string{"events:read"}}, true},
		{apikey.CreateInput{Name: ptr("server"), Scopes: []string{"vouchers:read", "checkouts:write", "widgets:read", "widgets:write", "webhooks:read", "webhooks:write", "events:read", "business:read"}}, true},
		{apikey.CreateInput{Scopes: []string{"events:read"}}, false},
		{apikey.CreateInput{Name: ptr(" "), Scopes: []string{"events:read"}}, false},
		{apikey.CreateInput{Name: ptr(strings.Repeat("é", 129)), Scopes: []string{"events:read"}}, false},
		{apikey.CreateInput{Name: ptr("a\nb"), Scopes: []string{"events:read"}}, false},
		{apikey.CreateInput{Name: ptr("server")}, false},
		{apikey.CreateInput{Name: ptr("server"), Scopes: []string{"events:write"}}, false},
		{apikey.CreateInput{Name: ptr("server"), Scopes: []string{"events:read", "events:read"}}, false},
	} {
		err := c.in.Validate()
		if (err == nil) != c.ok || (err != nil && !apperr.HasCode(err, apperr.ValidationFailed)) {
			t.Errorf("%+v: %v", c.in, err)
		}
	}
}

type fakeVerifier struct{ got string }

func (f *fakeVerifier) Verify(_ context.Context, token string) (*auth.Principal, error) {
	f.got = token
	return &auth.Principal{Kind: auth.KindUser, ID: "usr_x"}, nil
}

// TestAuthenticate: a key proves its business and scopes until revoked;
// lastUsedAt is written by the first use and not again within the
// minute; tokens that are not keys go to the next verifier.
func TestAuthenticate(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		ctx := context.Background()
		u := db.User.Create().SetEmail("o@example.com").SetPasswordHash("x").SaveX(ctx)
		b := db.Business.Create().SetName("Shop").SaveX(ctx)
		db.BusinessUser.Create().SetBusinessID(b.ID).SetUserID(u.ID).SetRole(businessuser.RoleOWNER).SaveX(ctx)
		owner := auth.WithPrincipal(ctx, &auth.Principal{Kind: auth.KindUser, ID: u.ID})
		svc := apikey.NewService(db, apikey.Options{})
		k, err := svc.Create(owner, b.ID, apikey.CreateInput{Name: ptr("server"), Scopes: []string{"business:read", "events:read"}})
		if err != nil {
			t.Fatal(err)
		}
		if db.APIKey.GetX(ctx, k.ID).KeyHash == k.Key || strings.Contains(db.APIKey.GetX(ctx, k.ID).KeyHash, k.Key[4:]) {
			t.Fatal("the key is stored")
		}
		p, err := svc.Authenticate(ctx, k.Key)
		if err != nil || p.Kind != auth.KindAPIKey || p.ID != k.ID || p.BusinessID != b.ID || !p.HasScope(auth.ScopeEventsRead) || p.HasScope(auth.ScopeWebhooksWrite) {
			t.Fatalf("authenticate: %+v, %v", p, err)
		}
		used := db.APIKey.GetX(ctx, k.ID).LastUsedAt
		if used == nil {
			t.Fatal("lastUsedAt not written by the first use")
		}
		for range 3 {
			if _, err := svc.Authenticate(ctx, k.Key); err != nil {
				t.Fatal(err)
			}
		}
		if again := db.APIKey.GetX(ctx, k.ID).LastUsedAt; again == nil || !again.Equal(*used) {
			t.Fatalf("lastUsedAt rewritten within the minute: %v then %v", used, again)
		}
		// Another replica's service (no shared memory) sees the same.
		if p, err := apikey.NewService(db, apikey.Options{}).Authenticate(ctx, k.Key); err != nil || p.ID != k.ID {
			t.Fatalf("a second service: %+v, %v", p, err)
		}
		for _, bad := range []string{"vsk_", "vsk_" + strings.Repeat("A", 43), k.Key[:len(k.Key)-1], k.Key + "A", "vsk_" + strings.Repeat("!", 43)} {
			if _, err := svc.Authenticate(ctx, bad); !apperr.HasCode(err, apperr.Unauthorized) {
				t.Errorf("%q: %v", bad, err)
			}
		}
		if _, err := svc.Revoke(owner, b.ID, k.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Authenticate(ctx, k.Key); !apperr.HasCode(err, apperr.Unauthorized) {
			t.Fatalf("a revoked key: %v", err)
		}
		next := &fakeVerifier{}
		v := svc.Verifier(next)
		if p, err := v.Verify(ctx, "eyJhbGciOi.x.y"); err != nil || p.ID != "usr_x" || next.got != "eyJhbGciOi.x.y" {
			t.Fatalf("a JWT goes to the next verifier: %+v %v", p, err)
		}
		next.got = ""
		if _, err := v.Verify(ctx, k.Key); !apperr.HasCode(err, apperr.Unauthorized) || next.got != "" {
			t.Fatalf("a key never reaches the next verifier: %v %q", err, next.got)
		}
	})
}
