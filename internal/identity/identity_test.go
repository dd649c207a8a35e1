package identity_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/identity"
	"github.com/voucherd/voucherd/internal/password"
	"github.com/voucherd/voucherd/internal/session"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type fixture struct {
	db       *storage.DB
	svc      *identity.Service
	sessions *session.Service
	issuer   *auth.Issuer
	now      time.Time
}

func newFixture(t *testing.T, db *storage.DB) *fixture {
	t.Helper()
	keys, err := auth.NewKeyring(auth.KeyFromSecret([]byte(strings.Repeat("k", 32))))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{db: db, now: time.Now().UTC()}
	f.issuer, err = auth.NewIssuer(auth.IssuerConfig{Keys: keys, Issuer: "test", Audience: "test"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := password.New(password.TestParams)
	if err != nil {
		t.Fatal(err)
	}
	f.sessions = session.NewService(db, 10*time.Minute, func() time.Time { return f.now })
	f.svc = identity.NewService(db, h, f.issuer, f.sessions)
	return f
}

func creds(t *testing.T, raw string) identity.Credentials {
	t.Helper()
	var c identity.Credentials
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return c
}

func wantCode(t *testing.T, err error, code apperr.Code) {
	t.Helper()
	if got := apperr.CodeOf(err); err == nil || got != code {
		t.Fatalf("want %s, got %v", code, err)
	}
}

var (
	inst32 = strings.Repeat("i", 32)
	pw32   = strings.Repeat("p", 32)
)

func TestSignUpAndSignInBoundsAndCodes(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		ctx := context.Background()
		cases := []struct {
			name string
			body string
			code apperr.Code // "" means success
		}{
			{"device ok at minimums", `{"type":"mobile-device","data":{"installationId":"` + inst32 + `","password":"` + pw32 + `"}}`, ""},
			{"device ok at maximums", `{"type":"mobile-device","data":{"installationId":"` + strings.Repeat("j", 128) + `","password":"` + strings.Repeat("p", 256) + `"}}`, ""},
			{"installationId too short", `{"type":"mobile-device","data":{"installationId":"` + inst32[1:] + `","password":"` + pw32 + `"}}`, apperr.ValidationFailed},
			{"installationId too long", `{"type":"mobile-device","data":{"installationId":"` + strings.Repeat("j", 129) + `","password":"` + pw32 + `"}}`, apperr.ValidationFailed},
			{"device password too short", `{"type":"mobile-device","data":{"installationId":"` + strings.Repeat("x", 40) + `","password":"` + pw32[1:] + `"}}`, apperr.ValidationFailed},
			{"device password too long", `{"type":"mobile-device","data":{"installationId":"` + strings.Repeat("x", 40) + `","password":"` + strings.Repeat("p", 257) + `"}}`, apperr.ValidationFailed},
			{"characters not bytes", `{"type":"mobile-device","data":{"installationId":"` + strings.Repeat("é", 128) + `","password":"` + pw32 + `"}}`, ""},
			{"user ok", `{"type":"email-password","data":{"email":"A@Example.com","password":"12345678"}}`, ""},
			{"user password too short", `{"type":"email-password","data":{"email":"b@example.com","password":"1234567"}}`, apperr.ValidationFailed},
			{"email too long", `{"type":"email-password","data":{"email":"` + strings.Repeat("e", 120) + `@example.com","password":"12345678"}}`, apperr.ValidationFailed},
			{"email not an address", `{"type":"email-password","data":{"email":"nope","password":"12345678"}}`, apperr.ValidationFailed},
			{"missing data", `{"type":"email-password"}`, apperr.ValidationFailed},
			{"field of another type", `{"type":"email-password","data":{"email":"c@example.com","password":"12345678","installationId":"` + inst32 + `"}}`, apperr.ValidationFailed},
			{"unknown data field", `{"type":"email-password","data":{"email":"c@example.com","password":"12345678","pin":"1"}}`, apperr.ValidationFailed},
			{"resource cannot sign up", `{"type":"resource","data":{"resource":"voucher::context::code::ABCDEF"}}`, apperr.InvalidType},
			{"missing type", `{"data":{"email":"c@example.com","password":"12345678"}}`, apperr.InvalidType},
			{"other type with unknown data", `{"type":"github","data":{"token":"x"}}`, apperr.InvalidType},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				res, err := f.svc.SignUp(ctx, creds(t, c.body))
				if c.code == "" {
					if err != nil {
						t.Fatalf("sign-up: %v", err)
					}
					if res.Authorization.Token == "" || res.User == nil || res.User.ID == "" {
						t.Fatalf("incomplete result %+v", res)
					}
					p, err := f.issuer.Verify(ctx, res.Authorization.Token)
					if err != nil || p.ID != res.User.ID {
						t.Fatalf("token does not prove the new account: %v %+v", err, p)
					}
					return
				}
				wantCode(t, err, c.code)
			})
		}

		// Taken email (case-insensitive) and installation id.
		_, err := f.svc.SignUp(ctx, creds(t, `{"type":"email-password","data":{"email":"a@example.COM","password":"12345678"}}`))
		wantCode(t, err, apperr.AlreadyExists)
		_, err = f.svc.SignUp(ctx, creds(t, `{"type":"mobile-device","data":{"installationId":"`+inst32+`","password":"`+pw32+`"}}`))
		wantCode(t, err, apperr.AlreadyExists)

		// Sign-in: right, wrong password, unknown account.
		res, err := f.svc.SignIn(ctx, creds(t, `{"type":"email-password","data":{"email":"a@example.com","password":"12345678"}}`))
		if err != nil || res.User.Type != identity.TypeEmailPassword {
			t.Fatalf("sign-in: %v %+v", err, res)
		}
		_, err = f.svc.SignIn(ctx, creds(t, `{"type":"email-password","data":{"email":"a@example.com","password":"12345679"}}`))
		wantCode(t, err, apperr.InvalidCredentials)
		_, err = f.svc.SignIn(ctx, creds(t, `{"type":"email-password","data":{"email":"zz@example.com","password":"12345678"}}`))
		wantCode(t, err, apperr.InvalidCredentials)
		res, err = f.svc.SignIn(ctx, creds(t, `{"type":"mobile-device","data":{"installationId":"`+inst32+`","password":"`+pw32+`"}}`))
		if err != nil || res.User.Type != identity.TypeMobileDevice {
			t.Fatalf("device sign-in: %v", err)
		}
		_, err = f.svc.SignIn(ctx, creds(t, `{"type":"mobile-device","data":{"installationId":"`+inst32+`","password":"`+strings.Repeat("q", 32)+`"}}`))
		wantCode(t, err, apperr.InvalidCredentials)
		_, err = f.svc.SignIn(ctx, creds(t, `{"type":"password","data":{}}`))
		wantCode(t, err, apperr.InvalidType)
		_, err = f.svc.SignIn(ctx, creds(t, `{"type":"resource","data":{"resource":"abc"}}`))
		wantCode(t, err, apperr.ValidationFailed)
	})
}

func TestResourceSignIn(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		ctx := context.Background()
		dev, err := f.svc.SignUp(ctx, creds(t, `{"type":"mobile-device","data":{"installationId":"`+inst32+`","password":"`+pw32+`"}}`))
		if err != nil {
			t.Fatal(err)
		}
		payer := auth.WithPrincipal(ctx, &auth.Principal{Kind: auth.KindDevice, ID: dev.User.ID})
		ses, err := f.sessions.Create(payer)
		if err != nil {
			t.Fatal(err)
		}
		signIn := func(code string) (*identity.Result, error) {
			return f.svc.SignIn(ctx, identity.Credentials{Type: identity.TypeResource, Data: &identity.Data{Resource: ptr(identity.ResourcePrefix + code)}})
		}
		// Codes are case-insensitive on input.
		res, err := signIn(strings.ToLower(ses.Code))
		if err != nil {
			t.Fatalf("resource sign-in: %v", err)
		}
		p, err := f.issuer.Verify(ctx, res.Authorization.Token)
		if err != nil || p.Kind != auth.KindResource || p.ID != ses.ID {
			t.Fatalf("resource token: %v %+v", err, p)
		}
		if p.ExpiresAt.After(ses.ExpiresAt) {
			t.Fatalf("resource token outlives its context: %v > %v", p.ExpiresAt, ses.ExpiresAt)
		}
		if res.User != nil {
			t.Fatalf("a resource sign-in names no user: %+v", res.User)
		}
		_, err = signIn("ZZZZZZ") // never existed
		wantCode(t, err, apperr.InvalidCredentials)
		_, err = f.svc.SignIn(ctx, identity.Credentials{Type: identity.TypeResource, Data: &identity.Data{Resource: ptr("voucher::other::" + ses.Code)}})
		wantCode(t, err, apperr.InvalidCredentials)

		// Expired, then closed: both refused.
		f.now = ses.ExpiresAt.Add(time.Second)
		_, err = signIn(ses.Code)
		wantCode(t, err, apperr.InvalidCredentials)
		f.now = time.Now().UTC()
		if _, err := f.sessions.Close(payer, ses.ID); err != nil {
			t.Fatal(err)
		}
		_, err = signIn(ses.Code)
		wantCode(t, err, apperr.InvalidCredentials)
	})
}

func TestViewer(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db)
		ctx := context.Background()
		_, err := f.svc.Viewer(ctx)
		wantCode(t, err, apperr.Unauthorized)
		u, err := f.svc.SignUp(ctx, creds(t, `{"type":"email-password","data":{"email":"v@example.com","password":"12345678"}}`))
		if err != nil {
			t.Fatal(err)
		}
		p, _ := f.issuer.Verify(ctx, u.Authorization.Token)
		v, err := f.svc.Viewer(auth.WithPrincipal(ctx, p))
		if err != nil || v.Email != "v@example.com" || v.ID != u.User.ID || v.Kind != auth.KindUser {
			t.Fatalf("viewer: %v %+v", err, v)
		}
	})
}

func ptr(s string) *string { return &s }
