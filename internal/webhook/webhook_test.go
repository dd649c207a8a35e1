package webhook_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	entbusiness "github.com/voucherd/voucherd/ent/business"
	"github.com/voucherd/voucherd/ent/webhookendpoint"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/view"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/internal/webhook/signing"
)

func wantCode(t *testing.T, err error, code apperr.Code) {
	t.Helper()
	if got := apperr.CodeOf(err); err == nil || got != code {
		t.Fatalf("err = %v, want code %s", err, code)
	}
}

func TestCreateEndpointValidation(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db, fixtureOptions{})
		long := strings.Repeat("é", webhook.MaxDescriptionLength+1)
		cases := []struct {
			name  string
			in    webhook.CreateEndpointInput
			field string
		}{
			{"missing url", webhook.CreateEndpointInput{Events: []string{webhook.DepositCreated}}, "url"},
			{"http", webhook.CreateEndpointInput{URL: "http://hooks.example.com/x", Events: []string{webhook.DepositCreated}}, "url"},
			{"loopback literal", webhook.CreateEndpointInput{URL: "https://127.0.0.1/x", Events: []string{webhook.DepositCreated}}, "url"},
			{"private literal", webhook.CreateEndpointInput{URL: "https://10.1.2.3/x", Events: []string{webhook.DepositCreated}}, "url"},
			{"metadata address", webhook.CreateEndpointInput{URL: "https://169.254.169.254/latest", Events: []string{webhook.DepositCreated}}, "url"},
			{"localhost", webhook.CreateEndpointInput{URL: "https://localhost/x", Events: []string{webhook.DepositCreated}}, "url"},
			{"ipv4-mapped ipv6", webhook.CreateEndpointInput{URL: "https://[::ffff:127.0.0.1]/x", Events: []string{webhook.DepositCreated}}, "url"},
			{"credentials", webhook.CreateEndpointInput{URL: "https://u:p@hooks.example.com/x", Events: []string{webhook.DepositCreated}}, "url"},
			{"no events", webhook.CreateEndpointInput{URL: "https://hooks.example.com/x", Events: []string{}}, "events"},
			{"unknown event", webhook.CreateEndpointInput{URL: "https://hooks.example.com/x", Events: []string{"deposit.refunded"}}, "events"},
			{"repeated event", webhook.CreateEndpointInput{URL: "https://hooks.example.com/x", Events: []string{webhook.DepositCreated, webhook.DepositCreated}}, "events"},
			{"long description", webhook.CreateEndpointInput{URL: "https://hooks.example.com/x", Description: &long, Events: []string{webhook.DepositCreated}}, "description"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				_, err := f.svc.CreateEndpoint(f.owner, f.biz.ID, c.in)
				wantCode(t, err, apperr.ValidationFailed)
				if d := apperr.From(err).Details; len(d) == 0 || d[0].Field != c.field {
					t.Fatalf("details = %+v, want field %s", d, c.field)
				}
				if strings.Contains(err.Error(), "u:p@") {
					t.Fatal("error echoes the URL's credentials")
				}
			})
		}
		if n := db.WebhookEndpoint.Query().CountX(context.Background()); n != 0 {
			t.Fatalf("%d endpoints stored by refused creates", n)
		}
		// Exactly 512 characters is fine.
		ok := strings.Repeat("é", webhook.MaxDescriptionLength)
		if _, err := f.svc.CreateEndpoint(f.owner, f.biz.ID, webhook.CreateEndpointInput{URL: "https://hooks.example.com/x", Description: &ok, Events: webhook.EventTypes}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestCreateEndpointSecret(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db, fixtureOptions{})
		ctx := context.Background()
		desc := "orders"
		e, err := f.svc.CreateEndpoint(f.admin, f.biz.ID, webhook.CreateEndpointInput{
			URL: "https://hooks.example.com/voucherd", Description: &desc, Events: []string{settlement.EventConfirmed, webhook.DepositCreated},
		})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(e.ID, "whe_") || e.URL != "https://hooks.example.com/voucherd" || e.Description != "orders" || !e.Enabled {
			t.Fatalf("endpoint = %+v", e)
		}
		if strings.Join(e.Events, ",") != "deposit.confirmed,deposit.created" {
			t.Fatalf("events = %v", e.Events)
		}
		key, err := signing.ParseSecret(e.SigningSecret)
		if err != nil || len(key) != signing.SecretSize {
			t.Fatalf("signing secret %q: %v", e.SigningSecret, err)
		}
		row := db.WebhookEndpoint.Query().Where(webhookendpoint.ID(e.ID)).OnlyX(ctx)
		if strings.Contains(row.SecretCiphertext, e.SigningSecret) || strings.Contains(row.SecretCiphertext, "whsec_") {
			t.Fatal("secret stored in clear")
		}
		plain, err := f.box.Open(row.SecretCiphertext, []byte(e.ID))
		if err != nil || string(plain) != e.SigningSecret {
			t.Fatalf("sealed secret does not open to the returned one: %v", err)
		}
		// Reads never carry the secret.
		got, err := f.svc.GetEndpoint(f.member, f.biz.ID, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		if v := view.OfEndpoint(got); v.SigningSecret != "" {
			t.Fatal("get shows the secret")
		}
		if strings.Contains(row.String(), e.SigningSecret) || strings.Contains(row.String(), row.SecretCiphertext) {
			t.Fatal("the row's String() shows the secret")
		}
	})
}

func TestEndpointAccess(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db, fixtureOptions{})
		e := f.endpoint(t, "https://hooks.example.com/a")
		in := webhook.CreateEndpointInput{URL: "https://hooks.example.com/b", Events: webhook.EventTypes}
		device := as(auth.KindDevice, "dev_x")

		_, err := f.svc.CreateEndpoint(context.Background(), f.biz.ID, in)
		wantCode(t, err, apperr.Unauthorized)
		_, err = f.svc.CreateEndpoint(device, f.biz.ID, in)
		wantCode(t, err, apperr.Forbidden)
		_, err = f.svc.CreateEndpoint(f.outsider, f.biz.ID, in)
		wantCode(t, err, apperr.NotFound)
		_, err = f.svc.CreateEndpoint(f.member, f.biz.ID, in)
		wantCode(t, err, apperr.Forbidden)
		_, err = f.svc.UpdateEndpoint(f.member, f.biz.ID, e.ID, webhook.UpdateEndpointInput{Enabled: ptr(false)})
		wantCode(t, err, apperr.Forbidden)
		_, err = f.svc.DeleteEndpoint(f.member, f.biz.ID, e.ID)
		wantCode(t, err, apperr.Forbidden)
		_, err = f.svc.RotateSecret(f.member, f.biz.ID, e.ID)
		wantCode(t, err, apperr.Forbidden)

		// Members read; outsiders learn nothing.
		if _, err := f.svc.GetEndpoint(f.member, f.biz.ID, e.ID); err != nil {
			t.Fatal(err)
		}
		if rows, err := f.svc.ListEndpoints(f.member, f.biz.ID, webhook.ListEndpointsInput{}); err != nil || len(rows) != 1 {
			t.Fatalf("member list: %d, %v", len(rows), err)
		}
		_, err = f.svc.GetEndpoint(f.outsider, f.biz.ID, e.ID)
		wantCode(t, err, apperr.NotFound)
		_, err = f.svc.EndpointByID(f.outsider, e.ID)
		wantCode(t, err, apperr.NotFound)
		if got, err := f.svc.EndpointByID(f.member, e.ID); err != nil || got.ID != e.ID {
			t.Fatalf("EndpointByID: %v", err)
		}
		_, err = f.svc.ListEndpoints(f.outsider, f.biz.ID, webhook.ListEndpointsInput{})
		wantCode(t, err, apperr.NotFound)
		// An endpoint id of another business is not found under this one.
		other := newFixture(t, db, fixtureOptions{})
		_, err = other.svc.GetEndpoint(other.owner, other.biz.ID, e.ID)
		wantCode(t, err, apperr.NotFound)

		// An INACTIVE business keeps its reads and loses its writes.
		f.setBusinessStatus(t, entbusiness.StatusINACTIVE)
		_, err = f.svc.CreateEndpoint(f.owner, f.biz.ID, in)
		wantCode(t, err, apperr.BusinessInactive)
		_, err = f.svc.UpdateEndpoint(f.owner, f.biz.ID, e.ID, webhook.UpdateEndpointInput{Enabled: ptr(false)})
		wantCode(t, err, apperr.BusinessInactive)
		_, err = f.svc.RotateSecret(f.owner, f.biz.ID, e.ID)
		wantCode(t, err, apperr.BusinessInactive)
		_, err = f.svc.DeleteEndpoint(f.owner, f.biz.ID, e.ID)
		wantCode(t, err, apperr.BusinessInactive)
		if _, err := f.svc.GetEndpoint(f.member, f.biz.ID, e.ID); err != nil {
			t.Fatal(err)
		}
		// The body is judged before the state.
		_, err = f.svc.CreateEndpoint(f.owner, f.biz.ID, webhook.CreateEndpointInput{URL: "ftp://x"})
		wantCode(t, err, apperr.ValidationFailed)
	})
}

func TestEndpointLimit(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db, fixtureOptions{})
		in := webhook.CreateEndpointInput{URL: "https://hooks.example.com/x", Events: webhook.EventTypes}
		// Concurrent creates past the limit: exactly 16 succeed.
		var wg sync.WaitGroup
		errs := make([]error, 20)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = f.svc.CreateEndpoint(f.owner, f.biz.ID, in)
			}()
		}
		wg.Wait()
		var ok, limited int
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case apperr.HasCode(err, apperr.LimitExceeded):
				limited++
			default:
				t.Fatalf("unexpected error %v", err)
			}
		}
		if ok != webhook.MaxEndpointsPerBusiness || limited != 4 {
			t.Fatalf("ok %d, limit_exceeded %d", ok, limited)
		}
		// A deleted endpoint frees its place.
		rows, _ := f.svc.ListEndpoints(f.owner, f.biz.ID, webhook.ListEndpointsInput{})
		if _, err := f.svc.DeleteEndpoint(f.owner, f.biz.ID, rows[0].ID); err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.CreateEndpoint(f.owner, f.biz.ID, in); err != nil {
			t.Fatal(err)
		}
		_, err := f.svc.CreateEndpoint(f.owner, f.biz.ID, in)
		wantCode(t, err, apperr.LimitExceeded)
	})
}

func TestListEndpoints(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		var now time.Time
		f := newFixture(t, db, fixtureOptions{})
		base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		f.svc = webhook.NewService(db, webhook.Options{Box: f.box, Log: quiet, Now: func() time.Time { return now }})
		var created []string
		for i := range 5 {
			now = base.Add(time.Duration(i) * time.Second)
			created = append(created, f.endpoint(t, "https://hooks.example.com/x").ID)
		}
		list := func(in webhook.ListEndpointsInput) []string {
			t.Helper()
			rows, err := f.svc.ListEndpoints(f.member, f.biz.ID, in)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]string, len(rows))
			for i, r := range rows {
				out[i] = r.ID
			}
			return out
		}
		ms := func(i int) *int64 { return ptr(base.Add(time.Duration(i) * time.Second).UnixMilli()) }
		eq := func(got []string, want ...int) {
			t.Helper()
			if len(got) != len(want) {
				t.Fatalf("got %v, want indexes %v", got, want)
			}
			for i, w := range want {
				if got[i] != created[w] {
					t.Fatalf("got %v, want indexes %v", got, want)
				}
			}
		}
		eq(list(webhook.ListEndpointsInput{}), 0, 1, 2, 3, 4)
		eq(list(webhook.ListEndpointsInput{Limit: ptr(2)}), 0, 1)
		eq(list(webhook.ListEndpointsInput{Limit: ptr(2), Offset: ptr(2)}), 2, 3)
		eq(list(webhook.ListEndpointsInput{Since: ms(1)}), 2, 3, 4)
		eq(list(webhook.ListEndpointsInput{Until: ms(3)}), 0, 1, 2)
		eq(list(webhook.ListEndpointsInput{Since: ms(0), Until: ms(4)}), 1, 2, 3)
		for _, in := range []webhook.ListEndpointsInput{
			{Limit: ptr(0)}, {Limit: ptr(101)}, {Offset: ptr(-1)}, {Since: ptr(int64(-1))}, {Until: ptr(int64(-5))},
		} {
			_, err := f.svc.ListEndpoints(f.member, f.biz.ID, in)
			wantCode(t, err, apperr.ValidationFailed)
		}
		// Deleted endpoints are gone from every read.
		if _, err := f.svc.DeleteEndpoint(f.owner, f.biz.ID, created[4]); err != nil {
			t.Fatal(err)
		}
		eq(list(webhook.ListEndpointsInput{}), 0, 1, 2, 3)
		_, err := f.svc.GetEndpoint(f.owner, f.biz.ID, created[4])
		wantCode(t, err, apperr.NotFound)
		_, err = f.svc.DeleteEndpoint(f.owner, f.biz.ID, created[4])
		wantCode(t, err, apperr.NotFound)
		_, err = f.svc.UpdateEndpoint(f.owner, f.biz.ID, created[4], webhook.UpdateEndpointInput{Enabled: ptr(true)})
		wantCode(t, err, apperr.NotFound)
		edge, err := f.biz.QueryWebhookEndpoints().Count(context.Background())
		if err != nil || edge != 4 {
			t.Fatalf("business edge counts %d endpoints (%v), want 4", edge, err)
		}
	})
}

func TestUpdateEndpoint(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db, fixtureOptions{})
		e := f.endpoint(t, "https://hooks.example.com/a", webhook.DepositCreated)
		got, err := f.svc.UpdateEndpoint(f.admin, f.biz.ID, e.ID, webhook.UpdateEndpointInput{
			URL: ptr("https://other.example.com/b"), Description: ptr("new"), Events: []string{settlement.EventFailed, webhook.DepositExpired},
		})
		if err != nil {
			t.Fatal(err)
		}
		if got.URL != "https://other.example.com/b" || got.Description != "new" || !got.Enabled ||
			strings.Join(got.Events, ",") != "deposit.failed,deposit.expired" {
			t.Fatalf("updated = %+v", got)
		}
		got, err = f.svc.UpdateEndpoint(f.admin, f.biz.ID, e.ID, webhook.UpdateEndpointInput{Enabled: ptr(false)})
		if err != nil || got.Enabled || got.URL != "https://other.example.com/b" {
			t.Fatalf("disable: %+v %v", got, err)
		}
		for _, in := range []webhook.UpdateEndpointInput{
			{URL: ptr("http://other.example.com/")}, {URL: ptr("")}, {Events: []string{}}, {Events: []string{"x"}},
			{Description: ptr(strings.Repeat("a", 513))},
		} {
			_, err := f.svc.UpdateEndpoint(f.admin, f.biz.ID, e.ID, in)
			wantCode(t, err, apperr.ValidationFailed)
		}
		after, _ := f.svc.GetEndpoint(f.admin, f.biz.ID, e.ID)
		if after.URL != "https://other.example.com/b" || after.Description != "new" || len(after.Events) != 2 {
			t.Fatalf("a refused update changed the endpoint: %+v", after)
		}
	})
}

func TestRotateSecret(t *testing.T) {
	eachDB(t, func(t *testing.T, db *storage.DB) {
		f := newFixture(t, db, fixtureOptions{})
		ctx := context.Background()
		e := f.endpoint(t, "https://hooks.example.com/a")
		r1, err := f.svc.RotateSecret(f.owner, f.biz.ID, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r1.SigningSecret == "" || r1.SigningSecret == e.SigningSecret || r1.ID != e.ID {
			t.Fatalf("rotated = %+v", r1)
		}
		row := db.WebhookEndpoint.Query().Where(webhookendpoint.ID(e.ID)).OnlyX(ctx)
		open := func(s string) string {
			p, err := f.box.Open(s, []byte(e.ID))
			if err != nil {
				t.Fatal(err)
			}
			return string(p)
		}
		if open(row.SecretCiphertext) != r1.SigningSecret || row.PreviousSecretCiphertext == nil || open(*row.PreviousSecretCiphertext) != e.SigningSecret {
			t.Fatal("rotation did not keep the old secret as the previous one")
		}
		if d := time.Until(*row.PreviousSecretExpiresAt); d < 23*time.Hour || d > 25*time.Hour {
			t.Fatalf("grace ends in %v", d)
		}
		// Rotating again drops the oldest.
		r2, err := f.svc.RotateSecret(f.admin, f.biz.ID, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		row = db.WebhookEndpoint.Query().Where(webhookendpoint.ID(e.ID)).OnlyX(ctx)
		if open(row.SecretCiphertext) != r2.SigningSecret || open(*row.PreviousSecretCiphertext) != r1.SigningSecret {
			t.Fatal("second rotation did not chain")
		}
	})
}
