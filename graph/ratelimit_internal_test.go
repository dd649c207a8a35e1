package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/voucherd/voucherd/graph/generated"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/httpx"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/ratelimit"
)

// The schema and the operations table agree: every root field is an
// operation (a query or mutation field without a budget would be a way
// around the limits), and every operation that names a GraphQL field names
// one the schema has.
func TestEveryRootFieldIsAnOperation(t *testing.T) {
	schema := generated.NewExecutableSchema(generated.Config{}).Schema()
	seen := map[string]bool{}
	for _, obj := range []*ast.Definition{schema.Query, schema.Mutation, schema.Subscription} {
		if obj == nil {
			continue
		}
		for _, f := range obj.Fields {
			if strings.HasPrefix(f.Name, "__") {
				continue
			}
			key := obj.Name + "." + f.Name
			seen[key] = true
			op, ok := operation.ByField(key)
			if !ok {
				t.Errorf("%s is not in the operations table (internal/operation): declare it with its guard, rate group and REST twin", key)
				continue
			}
			if obj == schema.Subscription {
				if op.Group != "" {
					t.Errorf("%s: subscriptions spend no budget, but it has group %q", key, op.Group)
				}
				continue
			}
			if arg := byID[op]; arg != "" && f.Arguments.ForName(arg) == nil {
				t.Errorf("%s is charged per %q, which is not one of its arguments", key, arg)
			}
			if _, ok := ratelimit.SpecTable()[op.Group]; !ok {
				t.Errorf("%s: unknown group %q", key, op.Group)
			}
		}
	}
	if len(seen) < 10 {
		t.Fatalf("walked only %d root fields: is the schema empty?", len(seen))
	}
	for _, op := range operation.All() {
		if op.GraphQL != "" && !seen[op.GraphQL] {
			t.Errorf("operation %s names GraphQL field %s, which the schema does not have", op.Name, op.GraphQL)
		}
	}
}

// node(id:) must charge every type it can load to a read of that type.
func TestEveryNodeTypeHasARateLimit(t *testing.T) {
	loaders := (&Resolver{}).nodeLoaders()
	if len(loaders) == 0 {
		t.Fatal("no node loaders")
	}
	for prefix := range loaders {
		if _, ok := nodeReads[prefix]; !ok {
			t.Errorf("node(id:) loads %s ids but nodeReads has no entry for them", prefix)
		}
	}
}

func TestChargesOf(t *testing.T) {
	for _, tc := range []struct {
		field string
		args  map[string]any
		want  []charge
	}{
		{"Mutation.signIn", nil, []charge{{operation.SignIn, 1}}},
		{"Mutation.negotiateVoucher", nil, []charge{{operation.NegotiateVoucher, 1}}},
		{"Query.viewer", nil, []charge{{operation.Viewer, 1}}},
		{"Query.node", map[string]any{"id": ids.Session + "x"}, []charge{{operation.GetSession, 1}}},
		{"Query.node", map[string]any{"id": "garbage"}, []charge{{operation.Node, 1}}},
		{"Query.nodes", map[string]any{"ids": []string{ids.Session + "a", ids.Business + "b", ids.Session + "c", ids.User + "d"}}, []charge{
			{operation.GetSession, 2},
			{operation.GetBusiness, 1},
			{operation.Node, 1},
		}},
		{"Query.nodes", map[string]any{"ids": []string{}}, []charge{{operation.Node, 1}}},
	} {
		got, err := chargesOf(tc.field, tc.args)
		if err != nil {
			t.Fatalf("%s: %v", tc.field, err)
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%s %v: %+v, want %+v", tc.field, tc.args, got, tc.want)
		}
		// Order within the result is by operation; compare as sets.
		for _, w := range tc.want {
			found := false
			for _, g := range got {
				found = found || g == w
			}
			if !found {
				t.Errorf("%s %v: %+v lacks %+v", tc.field, tc.args, got, w)
			}
		}
	}
	if _, err := chargesOf("Mutation.noSuchField", nil); !apperr.HasCode(err, apperr.Internal) {
		t.Fatalf("an unmapped field must not be free: %v", err)
	}
	if _, err := chargesOf("Subscription.voucherUpdated", nil); !apperr.HasCode(err, apperr.Internal) {
		t.Fatalf("a field without a group must not be charged as free: %v", err)
	}
}

func newTestLimits(t *testing.T, mode string) *limits {
	t.Helper()
	m, err := ratelimit.ParseMode(mode)
	if err != nil {
		t.Fatal(err)
	}
	cip, _ := httpx.NewClientIP(nil)
	return newLimits(ratelimit.NewGate(ratelimit.New(nil, m.Table(), nil), m, cip))
}

// rootCtx is the context a root field's middleware sees: as the generated
// executor builds it, under a field-less context for the root object.
func rootCtx(q *request, object, name, alias string, args map[string]any) context.Context {
	ctx := context.WithValue(context.Background(), requestKey{}, q)
	ctx = graphql.WithFieldContext(ctx, &graphql.FieldContext{Object: object})
	return graphql.WithFieldContext(ctx, &graphql.FieldContext{
		Object:     object,
		Field:      graphql.CollectedField{Field: &ast.Field{Name: name, Alias: alias}},
		Args:       args,
		IsResolver: true,
	})
}

func TestAroundFieldsChargesEachOccurrence(t *testing.T) {
	l := newTestLimits(t, "spec")
	q := &request{addr: "198.51.100.1"}
	calls := 0
	next := func(context.Context) (any, error) { calls++; return "ok", nil }
	for i := range 5 {
		if _, err := l.aroundFields(rootCtx(q, "Mutation", "signIn", "a"+string(rune('0'+i)), nil), next); err != nil {
			t.Fatalf("alias %d: %v", i, err)
		}
	}
	_, err := l.aroundFields(rootCtx(q, "Mutation", "signIn", "a5", nil), next)
	var ae *apperr.Error
	if !errors.As(err, &ae) || ae.Code != apperr.RateLimit || ae.RetryAfterSeconds < 1 || ae.RetryAfterSeconds > 300 {
		t.Fatalf("sixth alias: %v", err)
	}
	if calls != 5 {
		t.Fatalf("resolver ran %d times, want 5 (a refused field must not run)", calls)
	}
	h := make(http.Header)
	ratelimit.SetHeaders(h, q.decisions...)
	if h.Get("RateLimit-Policy") != `"auth";q=5;w=300` || !strings.HasPrefix(h.Get("RateLimit"), `"auth";r=0;`) || h.Get("Retry-After") == "" {
		t.Fatalf("headers %v", h)
	}

	// Nested fields and introspection are free.
	child := graphql.WithFieldContext(rootCtx(q, "Mutation", "signIn", "x", nil), &graphql.FieldContext{Object: "AuthResult", Field: graphql.CollectedField{Field: &ast.Field{Name: "authorization"}}})
	if _, err := l.aroundFields(child, next); err != nil {
		t.Fatalf("nested field charged: %v", err)
	}
	if _, err := l.aroundFields(rootCtx(q, "Query", "__schema", "__schema", nil), next); err != nil {
		t.Fatalf("introspection charged: %v", err)
	}

	// nodes(ids:) with more ids of one type than the budget holds is
	// refused whole: batching cannot beat the limit.
	ids11 := make([]string, 11)
	for i := range ids11 {
		ids11[i] = ids.Session + "x"
	}
	if _, err := l.aroundFields(rootCtx(q, "Query", "nodes", "nodes", map[string]any{"ids": ids11}), next); !apperr.HasCode(err, apperr.RateLimit) {
		t.Fatalf("nodes with 11 sessions on a budget of 10: %v", err)
	}
}

func TestSubscriptionCap(t *testing.T) {
	l := newTestLimits(t, "spec")
	q := &request{addr: "198.51.100.1", ws: true}
	p := &auth.Principal{Kind: auth.KindDevice, ID: "dev_x"}
	next := func(context.Context) (any, error) { return "ok", nil }
	var cancels []context.CancelFunc
	for i := range subscriptionsPerCaller {
		ctx, cancel := context.WithCancel(auth.WithPrincipal(rootCtx(q, "Subscription", "voucherUpdated", "s", nil), p))
		cancels = append(cancels, cancel)
		if _, err := l.aroundFields(ctx, next); err != nil {
			t.Fatalf("subscription %d: %v", i+1, err)
		}
	}
	over := auth.WithPrincipal(rootCtx(q, "Subscription", "voucherUpdated", "s", nil), p)
	if _, err := l.aroundFields(over, next); !apperr.HasCode(err, apperr.RateLimit) {
		t.Fatalf("subscription %d: %v", subscriptionsPerCaller+1, err)
	}
	// Another caller (anonymous, by address) is not affected.
	if _, err := l.aroundFields(rootCtx(q, "Subscription", "voucherUpdated", "s", nil), next); err != nil {
		t.Fatalf("another caller: %v", err)
	}
	// Ending a subscription gives its slot back.
	cancels[0]()
	waitFor(t, func() bool { return l.subsByCaller.Held(p.ID) == subscriptionsPerCaller-1 })
	if _, err := l.aroundFields(over, next); err != nil {
		t.Fatalf("after one ended: %v", err)
	}
	for _, c := range cancels {
		c()
	}
}

func TestConnectionCaps(t *testing.T) {
	l := newTestLimits(t, "spec")
	l.connsByAddr = ratelimit.NewSlots(2)
	l.connsByCaller = ratelimit.NewSlots(1)

	// Per address, before the upgrade.
	release := make(chan struct{})
	var started sync.WaitGroup
	var finished sync.WaitGroup
	h := l.middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Done()
		<-release
	}))
	upgrade := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/graphql", nil)
		r.RemoteAddr = "198.51.100.1:1"
		r.Header.Set("Connection", "Upgrade")
		r.Header.Set("Upgrade", "websocket")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for range 2 {
		started.Add(1)
		finished.Add(1)
		go func() { defer finished.Done(); upgrade() }()
	}
	started.Wait()
	w := upgrade()
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Header().Get("RateLimit-Policy"), `q=2;qu="concurrent-requests"`) {
		t.Fatalf("third connection: %d %v %s", w.Code, w.Header(), w.Body)
	}
	close(release)
	finished.Wait()
	if l.connsByAddr.Held(ratelimit.AddressKey("198.51.100.1")) != 0 {
		t.Fatal("ended connections still hold their slots")
	}

	// Per token subject, at connection_init.
	q := &request{addr: "198.51.100.1", ws: true}
	ctx := context.WithValue(context.Background(), requestKey{}, q)
	p := &auth.Principal{Kind: auth.KindDevice, ID: "dev_y"}
	init := l.wrapInit(func(ctx context.Context, _ transport.InitPayload) (context.Context, *transport.InitPayload, error) {
		return auth.WithPrincipal(ctx, p), nil, nil
	})
	if _, _, err := init(ctx, nil); err != nil {
		t.Fatalf("first: %v", err)
	}
	q2 := &request{addr: "198.51.100.2", ws: true}
	if _, _, err := init(context.WithValue(context.Background(), requestKey{}, q2), nil); !apperr.HasCode(err, apperr.RateLimit) {
		t.Fatalf("second connection of one subject: %v", err)
	}
	q.releaseAll()
	if _, _, err := init(context.WithValue(context.Background(), requestKey{}, q2), nil); err != nil {
		t.Fatalf("after the first ended: %v", err)
	}
}

// With limits off there is no limiter at all.
func TestLimitsOff(t *testing.T) {
	if l := newTestLimits(t, "off"); l != nil {
		t.Fatal("limits built while off")
	}
	var l *limits
	inner := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	if got := l.middleware(inner); got == nil {
		t.Fatal("nil limits must pass the handler through")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 200 {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("condition never held")
}

// Through the real handler: each alias is one charge, a refused field
// carries rate_limit and retryAfter, and the HTTP response carries the
// RateLimit fields. node(id:) of an unknown type needs no service, which
// lets this run without a database.
func TestHandlerChargesAliases(t *testing.T) {
	m, _ := ratelimit.ParseMode("spec")
	gate := ratelimit.NewGate(ratelimit.New(nil, m.Table(), nil), m, nil)
	h := NewHandler(&Resolver{}, Options{RateLimit: gate})
	var doc strings.Builder
	doc.WriteString("{")
	for i := range 11 {
		fmt.Fprintf(&doc, " n%d: node(id: \"nothing\") { id }", i)
	}
	doc.WriteString(" }")
	body, _ := json.Marshal(map[string]any{"query": doc.String()})
	r := httptest.NewRequest("POST", "/graphql", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.RemoteAddr = "198.51.100.1:1"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var res struct {
		Data   map[string]any
		Errors []struct {
			Path       []any
			Extensions map[string]any
		}
	}
	if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if len(res.Errors) != 1 || res.Errors[0].Extensions["code"] != "rate_limit" || res.Errors[0].Extensions["retryAfter"] == nil {
		t.Fatalf("11 aliases on a budget of 10: %s", w.Body)
	}
	if len(res.Data) != 11 {
		t.Fatalf("data %v", res.Data)
	}
	if got := w.Header().Get("RateLimit-Policy"); got != `"vouchers-read";q=10;w=600` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"vouchers-read";r=0;t=`) || w.Header().Get("Retry-After") == "" {
		t.Errorf("RateLimit %q, Retry-After %q", got, w.Header().Get("Retry-After"))
	}
}
