package graph_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testnats"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// The graphql-ws reference client (graphql-transport-ws), as a browser or
// a Node service would use it, against the real binary: a payee watching
// its voucher gets the current state, then REDEEMED and RESOLVED within a
// second of each REST call; a bad token is refused with 4403. The legacy
// graphql-ws protocol is checked alongside with the Go client.
func TestGraphQLWSReferenceClient(t *testing.T) {
	dir := graphqlWSClient(t)
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			srv := testserver.Start(t, testserver.Options{Dialect: dialect})
			payer := srv.Device(t)
			sesID, code := srv.Session(t, payer)
			payee := srv.Resource(t, code)

			// The payer's wallet watches its session over the legacy protocol.
			legacy := dialWS(t, wsURL(srv.URL), legacyWS)
			legacy.init(payer.Token)
			legacy.subscribe("s", voucherSub, map[string]any{"s": sesID})
			waitSubscriptions(t, srv, 1)

			v := reserve(t, srv, payee, code)
			want(t, legacy.voucher("s"), v, "RESERVED", 1)

			sub := startNodeClient(t, dir, srv, payee.Token, `subscription($id: ID!) { voucherUpdated(id: $id) { id status version } }`, map[string]any{"id": v}, 3)
			sub.connected()
			sub.voucher(t, v, "RESERVED", 1, time.Time{})

			redeemed := redeem(t, srv, payee, v)
			sub.voucher(t, v, "REDEEMED", 2, redeemed)
			want(t, legacy.voucher("s"), v, "REDEEMED", 2)

			resolved := resolve(t, srv, payer, v)
			sub.voucher(t, v, "RESOLVED", 3, resolved)
			want(t, legacy.voucher("s"), v, "RESOLVED", 3)

			bad := startNodeClient(t, dir, srv, "not-a-valid-token", `subscription($id: ID!) { voucherUpdated(id: $id) { id } }`, map[string]any{"id": v}, 1)
			bad.closedWith(t, 4403)
		})
	}
}

// Two replicas on one PostgreSQL form one service: a subscriber on either
// sees what is done on the other, within a second, over LISTEN/NOTIFY and
// over NATS.
func TestSubscriptionsAcrossReplicas(t *testing.T) {
	dir := graphqlWSClient(t)
	for _, transport := range testnats.Transports {
		t.Run(transport, func(t *testing.T) {
			env := testnats.Env(t, transport)
			a := testserver.Start(t, testserver.Options{Dialect: storage.Postgres, Env: env})
			b := testserver.Start(t, testserver.Options{Dialect: storage.Postgres, DatabaseURL: a.DatabaseURL, Env: env})
			payer := a.Device(t)
			sesID, code := a.Session(t, payer)
			payee := b.Resource(t, code)

			// The payer watches its session on b; the payee reserves on a.
			legacy := dialWS(t, wsURL(b.URL), legacyWS)
			legacy.init(payer.Token)
			legacy.subscribe("s", voucherSub, map[string]any{"s": sesID})
			waitSubscriptions(t, b, 1)
			v := reserve(t, a, payee, code)
			want(t, legacy.voucher("s"), v, "RESERVED", 1)

			// The payee watches its voucher on a and acts on b.
			sub := startNodeClient(t, dir, a, payee.Token, `subscription($id: ID!) { voucherUpdated(id: $id) { id status version } }`, map[string]any{"id": v}, 3)
			sub.connected()
			sub.voucher(t, v, "RESERVED", 1, time.Time{})
			redeemed := redeem(t, b, payee, v)
			sub.voucher(t, v, "REDEEMED", 2, redeemed)
			want(t, legacy.voucher("s"), v, "REDEEMED", 2)
			resolved := resolve(t, b, payer, v)
			sub.voucher(t, v, "RESOLVED", 3, resolved)
			want(t, legacy.voucher("s"), v, "RESOLVED", 3)
		})
	}
}

// Two replicas over NATS, and NATS stopped: both keep serving (a redeem on
// one answers 200), and once NATS is started again the subscriber on the
// other replica is sent what it missed (REDEEMED), then follows on as
// before; no version comes twice or out of order.
func TestSubscriptionsAcrossReplicasNATSRestart(t *testing.T) {
	nats := testnats.Start(t)
	env := map[string]string{"VOUCHER_PUBSUB_URL": nats.URL}
	a := testserver.Start(t, testserver.Options{Dialect: storage.Postgres, Env: env})
	b := testserver.Start(t, testserver.Options{Dialect: storage.Postgres, DatabaseURL: a.DatabaseURL, Env: env})
	payer := a.Device(t)
	sesID, code := a.Session(t, payer)
	payee := a.Resource(t, code)

	watcher := dialWS(t, wsURL(b.URL), legacyWS)
	watcher.init(payer.Token)
	watcher.subscribe("s", voucherSub, map[string]any{"s": sesID})
	waitSubscriptions(t, b, 1)
	v := reserve(t, a, payee, code)
	want(t, watcher.voucher("s"), v, "RESERVED", 1)

	nats.Stop()
	redeem(t, a, payee, v) // fails the test unless answered 200
	if r := b.Do(t, "GET", "/api/v1/vouchers/"+v, payer.Token, nil); r.Status != 200 || !strings.Contains(string(r.Body), `"REDEEMED"`) {
		t.Fatalf("the other replica's read with NATS down: %d %s", r.Status, r.Body)
	}
	nats.Restart()
	var got subEvent
	watcher.result("s", 20*time.Second, &got)
	want(t, got.VoucherUpdated, v, "REDEEMED", 2)
	resolve(t, a, payer, v)
	want(t, watcher.voucher("s"), v, "RESOLVED", 3)
	select {
	case m := <-watcher.msgs:
		if m.Type != "ka" {
			t.Fatalf("after RESOLVED: %s %s", m.Type, m.Payload)
		}
	case <-time.After(500 * time.Millisecond):
	}
}

// waitSubscriptions waits until srv reports n open subscriptions in its
// metrics: a client cannot otherwise know that its subscription is live
// (neither protocol acknowledges one), and a change before that is not
// its to see.
func waitSubscriptions(t *testing.T, srv *testserver.Server, n int) {
	t.Helper()
	want := fmt.Sprintf("voucherd_subscriptions %d\n", n)
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := srv.Do(t, "GET", "/metrics", "", nil)
		if strings.Contains(string(r.Body), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reported %d subscriptions", srv.URL, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const (
	e2eUSDC   = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"
	e2eWallet = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
)

func reserve(t *testing.T, srv *testserver.Server, payee testserver.Identity, code string) string {
	t.Helper()
	return srv.Reserve(t, payee.Token, map[string]any{"code": code})
}

// redeem redeems voucher v over REST and returns when the call returned.
func redeem(t *testing.T, srv *testserver.Server, payee testserver.Identity, v string) time.Time {
	t.Helper()
	r := srv.Do(t, "POST", "/api/v1/vouchers/"+v+"/redeem-voucher", payee.Token, map[string]any{"expectedPayment": map[string]any{
		"network": "ethereum", "currency": "USDC", "currencyAddress": e2eUSDC, "amount": "12.50",
		"wallet": map[string]any{"address": e2eWallet},
	}})
	if r.Status != 200 {
		t.Fatalf("redeem: %d %s", r.Status, r.Body)
	}
	return time.Now()
}

func resolve(t *testing.T, srv *testserver.Server, payer testserver.Identity, v string) time.Time {
	t.Helper()
	g := srv.Do(t, "GET", "/api/v1/vouchers/"+v, payer.Token, nil)
	var got struct {
		ExpectedPayment struct{ ID string } `json:"expectedPayment"`
	}
	g.JSON(t, &got)
	r := srv.Do(t, "POST", "/api/v1/vouchers/"+v+"/resolve-voucher", payer.Token, map[string]any{"receipts": []any{map[string]any{"paymentId": got.ExpectedPayment.ID}}})
	if r.Status != 200 {
		t.Fatalf("resolve: %d %s", r.Status, r.Body)
	}
	return time.Now()
}

var (
	npmOnce sync.Once
	npmErr  error
)

// graphqlWSClient returns the client's directory with its dependencies
// installed (npm ci, once per test process). Without Node the test is
// skipped, except in CI, where it must run.
func graphqlWSClient(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is required in CI for the graphql-ws reference client test", tool)
			}
			t.Skipf("%s not found: the graphql-ws reference client test needs Node.js 20 or later", tool)
		}
	}
	dir, err := filepath.Abs(filepath.Join("..", "test", "graphql-ws-client"))
	if err != nil {
		t.Fatal(err)
	}
	npmOnce.Do(func() {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			npmErr = fmt.Errorf("npm ci in %s: %v\n%s", dir, err, out)
		}
	})
	if npmErr != nil {
		t.Fatal(npmErr)
	}
	return dir
}

// nodeClient is a running client.mjs and the lines it printed, each with
// the time it arrived.
type nodeClient struct {
	t     *testing.T
	lines chan nodeLine
}

type nodeLine struct {
	at  time.Time
	msg struct {
		Type    string          `json:"type"`
		Code    int             `json:"code"`
		Reason  string          `json:"reason"`
		Payload json.RawMessage `json:"payload"`
		Errors  json.RawMessage `json:"errors"`
	}
	raw string
}

func startNodeClient(t *testing.T, dir string, srv *testserver.Server, token, query string, vars map[string]any, count int) *nodeClient {
	t.Helper()
	vj, _ := json.Marshal(vars)
	cmd := exec.Command("node", "client.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "URL="+wsURL(srv.URL), "TOKEN="+token, "QUERY="+query, "VARIABLES="+string(vj), fmt.Sprint("COUNT=", count))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &nodeClient{t: t, lines: make(chan nodeLine, 64)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			l := nodeLine{at: time.Now(), raw: sc.Text()}
			if err := json.Unmarshal(sc.Bytes(), &l.msg); err != nil {
				l.msg.Type = "unparsable"
			}
			c.lines <- l
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return c
}

func (c *nodeClient) next() nodeLine {
	c.t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			c.t.Fatal("graphql-ws client exited")
		}
		return l
	case <-time.After(10 * time.Second):
		c.t.Fatal("graphql-ws client printed nothing for 10s")
	}
	return nodeLine{}
}

func (c *nodeClient) connected() {
	c.t.Helper()
	if l := c.next(); l.msg.Type != "connected" {
		c.t.Fatalf("want connected, got %s", l.raw)
	}
}

// voucher waits for a result showing voucher id at status and version;
// with a non-zero after, it must arrive within a second of it.
func (c *nodeClient) voucher(t *testing.T, id, status string, version int, after time.Time) {
	t.Helper()
	l := c.next()
	if l.msg.Type != "next" {
		t.Fatalf("want a result, got %s", l.raw)
	}
	var r struct {
		Data struct{ VoucherUpdated subVoucher }
	}
	if err := json.Unmarshal(l.msg.Payload, &r); err != nil {
		t.Fatalf("%s: %v", l.raw, err)
	}
	want(t, r.Data.VoucherUpdated, id, status, version)
	if !after.IsZero() && l.at.Sub(after) > time.Second {
		t.Fatalf("%s arrived %v after the REST call returned", status, l.at.Sub(after))
	}
}

func (c *nodeClient) closedWith(t *testing.T, code int) {
	t.Helper()
	for {
		l := c.next()
		switch l.msg.Type {
		case "connected":
			continue
		case "closed":
			if l.msg.Code != code {
				t.Fatalf("closed with %d %q, want %d", l.msg.Code, l.msg.Reason, code)
			}
			return
		default:
			t.Fatalf("want close %d, got %s", code, l.raw)
		}
	}
}

// A graceful shutdown closes every websocket with 1001 (going away), the
// code clients read as "reconnect, elsewhere if need be".
func TestShutdownClosesWebsockets(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{Dialect: storage.SQLite})
	payer := srv.Device(t)
	sesID, _ := srv.Session(t, payer)
	var conns []*wsClient
	for _, proto := range protocols {
		c := dialWS(t, wsURL(srv.URL), proto)
		c.init(payer.Token)
		c.subscribe("s", voucherSub, map[string]any{"s": sesID})
		conns = append(conns, c)
	}
	waitSubscriptions(t, srv, 2)
	srv.Stop(t)
	for _, c := range conns {
		if code, _ := c.closed(5 * time.Second); code != 1001 {
			t.Fatalf("%s: closed with %d at shutdown, want 1001", c.proto, code)
		}
	}
	if exited, code := srv.Exited(); !exited || code != 0 {
		t.Fatalf("exit: %v %d", exited, code)
	}
}
