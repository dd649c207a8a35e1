// The composition root: App assembles the service from its configuration:
// storage, services, the two doors and the background workers. main runs
// it; the end-to-end tests run the same binary (testsupport/testserver).

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/voucherd/voucherd/checkoutpage"
	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/graph"
	"github.com/voucherd/voucherd/internal/apikey"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/config"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/httpx"
	"github.com/voucherd/voucherd/internal/idempotency"
	"github.com/voucherd/voucherd/internal/identity"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/metrics"
	"github.com/voucherd/voucherd/internal/netguard"
	"github.com/voucherd/voucherd/internal/password"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/pubsub/natsbus"
	"github.com/voucherd/voucherd/internal/ratelimit"
	"github.com/voucherd/voucherd/internal/revocation"
	"github.com/voucherd/voucherd/internal/secretbox"
	"github.com/voucherd/voucherd/internal/services"
	"github.com/voucherd/voucherd/internal/session"
	"github.com/voucherd/voucherd/internal/settlement"
	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
	"github.com/voucherd/voucherd/internal/settlement/networks"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/view"
	"github.com/voucherd/voucherd/internal/voucher"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/internal/webhook/sender"
	"github.com/voucherd/voucherd/internal/widget"
	"github.com/voucherd/voucherd/rest"
)

// App is the assembled service.
type App struct {
	Config *config.Config
	Log    *slog.Logger
	DB     *storage.DB

	Issuer *auth.Issuer
	Box    secretbox.Key
	// Services are the domain services both doors call (Sessions,
	// Identity, Businesses, Webhooks: endpoints and the delivery log,
	// Vouchers, Finance: the token registry, prices and FX quotes, Widgets:
	// widgets, their public operations and checkouts).
	services.Services
	// Outbox is the voucher service's EventSink; Dispatcher delivers
	// webhooks (run by Start).
	Outbox     *webhook.Outbox
	Dispatcher *webhook.Dispatcher
	// Hub fans voucher changes out to GraphQL subscribers; on PostgreSQL
	// the listener feeds it every replica's changes, which each replica's
	// notifier sends after commit.
	Hub      *pubsub.Hub
	listener *pubsub.Listener
	// notifier tells the other replicas: pubsub.Notifier (LISTEN/NOTIFY)
	// or, with VOUCHER_PUBSUB_URL, natsbus.Bus, which also feeds the hub.
	notifier crossReplica
	// dispatcher is Dispatcher for the NATS bus's handlers, which may
	// run before buildWebhooks made it.
	dispatcher atomic.Pointer[webhook.Dispatcher]
	// sockets ends every GraphQL websocket at shutdown (they are detached
	// from their HTTP requests, which the HTTP server's shutdown ends).
	sockets      context.Context
	closeSockets context.CancelFunc
	// draining ends with BeginShutdown: the checkout pages' event streams
	// (long-lived HTTP responses the server's Shutdown would wait for).
	draining    context.Context
	endDraining context.CancelFunc
	// graphql is the GraphQL door; Shutdown waits for its websockets'
	// close frames.
	graphql *graph.Handler
	// principals finds the GraphQL websockets of a session's resource
	// tokens and of a user, to close them when the session closes or a
	// membership of the user ends (endLocalSockets).
	principals *graph.Sockets
	// ends spreads those ends over the replicas: each closes its sockets
	// and forgets the principal in its caches (the sessions' live
	// sessions, the vouchers' ACTIVE memberships) before the ending request
	// is answered (internal/revocation).
	ends *revocation.Ends
	// Settlement keeps resolved vouchers' settlement; its watcher (run by
	// Start) follows the verified networks' chains.
	Settlement *settlement.Service
	// chains are the verified networks (WithSettlementNetworks).
	chains []settlement.Network
	// Idempotency keeps the answers of REST POSTs sent with an
	// Idempotency-Key.
	Idempotency *idempotency.Store
	// Chains are the dialed nodes of the finance file's networks that have
	// an rpcUrl (chain id checked at start), by network name; the settlement
	// watcher polls them.
	Chains   map[string]settlement.Chain
	networks *networks.Set

	// metrics are the series the services feed through their hooks.
	metrics struct {
		webhooks   *metrics.Webhooks
		graphql    *metrics.GraphQL
		settlement *metrics.Settlement
	}

	handler http.Handler
	wg      sync.WaitGroup
	stop    context.CancelFunc
}

// crossReplica sends this replica's committed changes, wake-ups and
// messages to the other replicas: pubsub.Notifier over LISTEN/NOTIFY, or
// natsbus.Bus over NATS.
type crossReplica interface {
	pubsub.Publisher
	Signal(channel string)
	Send(channel, payload string)
	Close(ctx context.Context) error
}

// Clock is the time source; tests replace it.
type Clock func() time.Time

// Option adjusts how newApp assembles the App.
type Option func(*App)

// WithSettlementNetworks makes networks verified: their receipts are
// checked on their chains (each network's Chain already dialled and its
// chain id checked).
func WithSettlementNetworks(networks ...settlement.Network) Option {
	return func(a *App) { a.chains = append(a.chains, networks...) }
}

// newApp opens storage, migrates it and builds every service.
func newApp(ctx context.Context, cfg *config.Config, log *slog.Logger, opts ...Option) (*App, error) {
	db, err := storage.Open(ctx, cfg.DatabaseURL, storage.Options{MaxOpenConns: cfg.DBMaxConns, Unprepared: !cfg.DBPrepare})
	if err != nil {
		return nil, err
	}
	a := &App{Config: cfg, Log: log, DB: db}
	for _, o := range opts {
		o(a)
	}
	if err := a.build(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return a, nil
}

func (a *App) build(ctx context.Context) error {
	cfg, db := a.Config, a.DB
	if err := db.Migrate(ctx); err != nil {
		return err
	}
	jwtSecret, err := a.secret(ctx, cfg.JWTSecret, "jwt_secret")
	if err != nil {
		return err
	}
	keys, err := auth.NewKeyring(auth.KeyFromSecret([]byte(jwtSecret)))
	if err != nil {
		return fmt.Errorf("jwt key: %w", err)
	}
	a.Issuer, err = auth.NewIssuer(auth.IssuerConfig{
		Keys: keys, Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience,
		UserTTL: time.Hour, DeviceTTL: time.Hour, ResourceTTL: cfg.ResourceTokenTTL,
	})
	if err != nil {
		return err
	}
	encKey, err := a.secret(ctx, cfg.EncryptionKey, "encryption_key")
	if err != nil {
		return err
	}
	if a.Box, err = secretbox.ParseKey(encKey); err != nil {
		return fmt.Errorf("VOUCHER_ENCRYPTION_KEY: %w", err)
	}
	hasher, err := password.New(passwordParams)
	if err != nil {
		return err
	}

	a.Sessions = session.NewService(db, cfg.SessionTTL, nil)
	a.Identity = identity.NewService(db, hasher, a.Issuer, a.Sessions)
	a.Businesses = business.NewService(db, nil)
	a.APIKeys = apikey.NewService(db, apikey.Options{Log: a.Log})
	a.principals = graph.NewSockets()
	a.ends = revocation.New(revocation.Options{Log: a.Log})
	a.ends.OnEnd(a.endLocalSockets)
	a.Sessions.Revocations(a.ends)
	a.APIKeys.Revocations(a.ends)
	if err := a.buildPubsub(ctx); err != nil {
		return err
	}
	a.Sessions.OnClose(a.ends.End)
	a.Businesses.OnMembershipEnd(a.ends.End)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		metrics.BuildInfo(), metrics.DBStats(db.SQL))
	a.metrics.webhooks = metrics.NewWebhooks(reg, db.SQL)
	a.metrics.graphql = metrics.NewGraphQL(reg)
	names := make([]string, len(a.chains))
	for i, n := range a.chains {
		names[i] = n.Name
	}
	a.metrics.settlement = metrics.NewSettlement(reg, names)
	for i := range a.chains {
		a.chains[i].Chain = a.metrics.settlement.Chain(a.chains[i].Name, a.chains[i].Chain)
	}
	a.buildWebhooks()
	if err := a.buildVouchers(ctx); err != nil {
		return err
	}
	a.Widgets, err = widget.NewService(db, widget.Options{
		Vouchers: a.Vouchers, Finance: a.Finance, PublicURL: cfg.PublicURL, Log: a.Log,
	})
	if err != nil {
		return err
	}

	a.Idempotency = idempotency.New(db, a.Box, idempotency.Options{Log: a.Log})

	limits, err := a.rateLimits()
	if err != nil {
		return err
	}

	reg.MustRegister(pubsub.Collectors(a.Hub)...)
	httpMetrics := httpx.NewMetrics(reg)
	cors := httpx.NewCORS(cfg.CORSOrigins)

	a.graphql = graph.NewHandler(&graph.Resolver{Services: a.Services, Hub: a.Hub}, graph.Options{Log: a.Log, Verifier: a.verifier(), Development: cfg.IsDevelopment(), TimeBudget: cfg.GraphQLTimeBudget, RateLimit: limits, Base: a.sockets, Sockets: a.principals, CheckOrigin: cors.CheckOrigin, Metrics: a.metrics.graphql})
	reg.MustRegister(metrics.Websockets(a.graphql.Websockets))

	mux := http.NewServeMux()
	rest.Register(mux, a.Services, rest.Options{Log: a.Log, Limiter: limits, Idempotency: a.Idempotency, ClientAddr: limits.ClientAddr})
	checkoutpage.Register(mux, checkoutpage.Options{Widgets: a.Widgets, Hub: a.Hub, Done: a.draining, Log: a.Log})
	mux.Handle("/graphql", a.graphql)
	if cfg.IsDevelopment() {
		mux.Handle("GET /graphiql", a.graphql)
		mux.Handle("GET /graphiql/assets/", a.graphql)
		mux.Handle("GET /graphql/schema.graphql", a.graphql)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		pctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := db.Ping(pctx); err != nil {
			httpx.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "database unreachable"})
			return
		}
		httpx.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	// Compressed by httpx.Gzip around every route, whose compressors are
	// kept across collections: promhttp's own gzip made a new one (over
	// half a megabyte) for every scrape.
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{DisableCompression: true}))
	mux.HandleFunc("/", httpx.NotFound)
	// CORS sits outside authentication so that a refused token's 401 still
	// reaches the page that sent it; gzip outside both compresses errors too.
	a.handler = httpx.Middleware(a.Log, httpMetrics, httpx.Gzip(cors.Wrap(auth.Middleware(a.verifier(), httpx.Routes(mux)))))
	return nil
}

// verifier proves bearer tokens on both doors: API keys (vsk_…) by the
// API key service, JWTs by the issuer, a resource token only while its
// session lives.
func (a *App) verifier() auth.Verifier {
	return a.APIKeys.Verifier(a.Sessions.Verifier(a.Issuer))
}

// rateLimits builds the gate both doors charge: budgets in PostgreSQL when
// that is the database (shared by every replica), in memory on SQLite.
func (a *App) rateLimits() (*ratelimit.Gate, error) {
	mode, err := ratelimit.ParseMode(a.Config.RateLimits)
	if err != nil {
		return nil, fmt.Errorf("VOUCHER_RATE_LIMITS: %w", err)
	}
	clientIP, err := httpx.NewClientIP(a.Config.TrustedProxyList())
	if err != nil {
		return nil, fmt.Errorf("VOUCHER_TRUSTED_PROXIES: %w", err)
	}
	return ratelimit.NewGate(ratelimit.New(a.DB, mode.Table(), nil), mode, clientIP), nil
}

// secret returns the configured value, or in development one generated once
// and kept in the database so replicas share it. Production configuration
// validation already refused a missing secret.
func (a *App) secret(ctx context.Context, configured, key string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	if !a.Config.IsDevelopment() {
		return "", fmt.Errorf("%s is required outside development", key)
	}
	return a.DB.Setting(ctx, key, func() (string, error) {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		return base64.StdEncoding.EncodeToString(b[:]), nil
	})
}

// buildWebhooks wires deposit events: the outbox (the voucher service's
// EventSink) wakes the local dispatcher after each commit that queued
// deliveries; on PostgreSQL the dispatcher also listens for other replicas'.
func (a *App) buildWebhooks() {
	cfg := a.Config
	listen := ""
	if a.DB.IsPostgres() && cfg.PubSubURL == "" {
		// Over NATS the bus wakes the dispatcher instead (buildPubsub).
		listen = cfg.DatabaseURL
	}
	claim := ""
	if a.DB.IsPostgres() {
		claim = cfg.DatabaseURL
	}
	a.Dispatcher = webhook.NewDispatcher(a.DB, webhook.DispatcherOptions{
		Transport:     sender.New(netguard.Options{AllowPrivate: cfg.WebhookAllowPrivate}),
		Box:           a.Box,
		AllowPrivate:  cfg.WebhookAllowPrivate,
		RetryInterval: cfg.WebhookRetryInterval,
		Workers:       cfg.WebhookWorkers,
		ListenURL:     listen,
		ClaimURL:      claim,
		Log:           a.Log,
		OnAttempt:     a.metrics.webhooks.OnAttempt,
	})
	a.dispatcher.Store(a.Dispatcher)
	a.Webhooks = webhook.NewService(a.DB, webhook.Options{
		Box: a.Box, AllowPrivate: cfg.WebhookAllowPrivate, Dispatcher: a.Dispatcher, Log: a.Log,
	})
	wake := a.Dispatcher.Wake
	if n := a.notifier; n != nil {
		wake = func() {
			a.Dispatcher.Wake()
			n.Signal(webhook.NotifyChannel)
		}
	}
	a.Outbox = webhook.NewOutbox(a.DB, webhook.OutboxOptions{
		View: func(v *ent.Voucher) any { return view.OfVoucher(v) },
		Wake: wake,
	})
}

// Handler is the whole HTTP surface.
func (a *App) Handler() http.Handler { return a.handler }

// Start runs the background workers until Shutdown.
func (a *App) Start(ctx context.Context) {
	ctx, a.stop = context.WithCancel(ctx)
	a.every(ctx, "sweeper", a.Config.SweepInterval, a.sweep)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.Settlement.Run(ctx)
	}()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		// Returns once ctx ends and the attempts in flight are recorded.
		a.Dispatcher.Run(ctx)
	}()
}

// every runs fn every interval until ctx ends.
func (a *App) every(ctx context.Context, name string, interval time.Duration, fn func(context.Context) error) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := fn(ctx); err != nil && !errors.Is(err, context.Canceled) {
					a.Log.ErrorContext(ctx, "background task failed", "task", name, "err", err.Error())
				}
			}
		}
	}()
}

// sweep records expiries and prunes the event log past its retention. It is idempotent, so replicas sweeping at once
// only repeat each other's no-ops; on PostgreSQL an advisory lock keeps it to
// one replica at a time.
func (a *App) sweep(ctx context.Context) error {
	return a.DB.WithTryLock(ctx, storage.LockSweeper, func(ctx context.Context) error {
		_, serr := a.Sessions.SweepExpired(ctx)
		_, verr := a.Vouchers.SweepExpired(ctx)
		_, ierr := a.Idempotency.Sweep(ctx)
		_, eerr := a.Webhooks.PruneEvents(ctx)
		return errors.Join(serr, verr, ierr, eerr)
	})
}

// buildVouchers wires the voucher service: the finance config from
// VOUCHER_FINANCE_FILE (the embedded development default when unset), the
// FX spread, the voucher lifetime, the outbox as its event sink and the
// hub as its publisher.
func (a *App) buildVouchers(ctx context.Context) error {
	cfg := a.Config
	fc := finance.Default()
	if cfg.FinanceFile != "" {
		var err error
		if fc, err = finance.LoadFile(cfg.FinanceFile); err != nil {
			return fmt.Errorf("VOUCHER_FINANCE_FILE: %w", err)
		}
	}
	// Dial every network with an rpcUrl and check its chain id; in
	// production refuse networks with tokens and no rpcUrl unless
	// VOUCHER_TRUST_RECEIPTS.
	// VOUCHER_SWEEP_KEY: the account that pays the gas of sweeping deposit
	// addresses (never one that holds a business's funds).
	var sweepKey *ecdsa.PrivateKey
	if cfg.SweepKey != "" {
		var err error
		if sweepKey, err = deposit.ParseKey(cfg.SweepKey); err != nil {
			return fmt.Errorf("VOUCHER_SWEEP_KEY: %w", err)
		}
	}
	set, err := networks.Dial(ctx, fc.Registry, networks.Options{
		Production: !cfg.IsDevelopment(), TrustReceipts: cfg.TrustReceipts,
		Timeout: cfg.RPCTimeout, Log: a.Log, SweepKey: sweepKey,
	})
	if err != nil {
		return err
	}
	a.networks, a.Chains = set, set.Chains
	// The settlement watcher polls every dialed network, at the finance
	// file's confirmations and pollInterval (a network a test injected
	// with WithSettlementNetworks keeps its own chain).
	injected := map[string]bool{}
	for _, n := range a.chains {
		injected[n.Name] = true
	}
	for _, n := range fc.Registry.Networks() {
		if c, ok := set.Chains[n.Name]; ok && !injected[n.Name] {
			a.chains = append(a.chains, settlement.Network{
				Name: n.Name, Chain: c, Confirmations: int(n.Confirmations), PollInterval: n.PollInterval,
			})
		}
	}
	live := finance.LiveOptions{}
	if !cfg.IsDevelopment() {
		live.FileMaxAge = cfg.PriceMaxAge
	}
	prices, err := finance.NewLivePrices(fc, set.Feeds, live)
	if err != nil {
		return err
	}
	fin, err := finance.New(fc, finance.WithSpreadBps(int64(cfg.FXSpreadBps)), finance.WithPriceSource(prices))
	if err != nil {
		return err
	}
	a.Finance = fin
	a.Settlement, err = settlement.NewService(a.DB, fin.Registry(), settlement.Options{
		Networks: a.chains, Window: cfg.SettlementWindow, Events: a.Outbox, Publisher: a.publisher(), Log: a.Log,
		Polled: a.metrics.settlement.Polled, SweepFailed: a.metrics.settlement.SweepFailed,
		Sweepers: set.Sweepers,
	})
	if err != nil {
		return err
	}
	a.Vouchers, err = voucher.NewService(a.DB, voucher.Options{
		Finance: fin, Sessions: a.Sessions, TTL: cfg.VoucherTTL,
		Events: a.Outbox, Publisher: a.publisher(), Settlement: a.Settlement, Ends: a.ends, Log: a.Log,
	})
	return err
}

// BeginShutdown ends the long-lived HTTP responses (checkout event
// streams), so that http.Server.Shutdown can drain; register it with
// RegisterOnShutdown.
func (a *App) BeginShutdown() {
	if a.endDraining != nil {
		a.endDraining()
	}
}

// Shutdown stops the background workers and closes storage.
func (a *App) Shutdown(ctx context.Context) error {
	a.BeginShutdown()
	if a.graphql != nil {
		if err := a.graphql.Shutdown(ctx); err != nil {
			a.Log.Warn("graphql websockets did not all close in time", "err", err.Error())
		}
	}
	if a.closeSockets != nil {
		a.closeSockets()
	}
	if a.stop != nil {
		a.stop()
	}
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	a.closePubsub(ctx)
	if a.networks != nil {
		a.networks.Close()
	}
	return a.DB.Close()
}

// buildPubsub starts the subscription hub. The voucher service publishes
// its own changes to it after each commit, with their new state. On
// PostgreSQL it also hands them to the notifier, which tells the other
// replicas (with the row when it fits) after commit, and the listener
// publishes every other replica's changes here (it never hears this
// one's), so a change on any replica reaches this one's subscribers; rows
// from notifications get the same read model as loaded vouchers. The notifier starts first so that the other replicas
// know this one before it commits anything; the listener tells it when
// other replicas come and go (alone, it sends nothing).
func (a *App) buildPubsub(ctx context.Context) error {
	a.sockets, a.closeSockets = context.WithCancel(context.Background())
	a.draining, a.endDraining = context.WithCancel(context.Background())
	a.Hub = pubsub.NewHub(pubsub.EntLoader{Client: a.DB.Client}, pubsub.Options{Log: a.Log, Prepare: voucher.ReadModel(time.Now)})
	if !a.DB.IsPostgres() {
		return nil
	}
	if a.Config.PubSubURL != "" {
		return a.buildNATS(ctx)
	}
	n, err := pubsub.NewNotifier(ctx, a.Config.DatabaseURL, pubsub.NotifierOptions{Log: a.Log})
	if err != nil {
		a.Hub.Close()
		return err
	}
	l, err := pubsub.Listen(ctx, a.Config.DatabaseURL, a.Hub, pubsub.ListenerOptions{Log: a.Log, Replica: n.Replica(), Peers: n,
		Handlers: map[string]func(string){revocation.EndedChannel: a.ends.Handle, revocation.AckChannel: a.ends.HandleAck},
		Lost:     a.ends.Lost})
	if err != nil {
		_ = n.Close(ctx)
		a.Hub.Close()
		return err
	}
	a.notifier, a.listener = n, l
	a.ends.Connect(revocation.Transport{Replica: n.Replica(), Send: n.Send, Peers: l.Peers, Heard: l.Heard})
	return nil
}

// buildNATS is buildPubsub over NATS (VOUCHER_PUBSUB_URL): one bus both
// tells the other replicas and feeds the hub with theirs; the webhook
// dispatcher is woken by it, and once more after every reconnection (a
// wake-up may have been lost; the poll would find it later anyway).
// PostgreSQL stays the source of truth: whatever NATS loses, the hub
// re-reads (natsbus).
func (a *App) buildNATS(ctx context.Context) error {
	bus, err := natsbus.Connect(ctx, a.Hub, natsbus.Options{
		URL: a.Config.PubSubURL, Log: a.Log,
		Handlers: map[string]func(string){
			revocation.EndedChannel: a.ends.Handle,
			revocation.AckChannel:   a.ends.HandleAck,
			webhook.NotifyChannel:   func(string) { a.wakeDispatcher() },
		},
		Lost:        a.ends.Lost,
		Reconnected: a.wakeDispatcher,
	})
	if err != nil {
		a.Hub.Close()
		return err
	}
	a.notifier = bus
	a.ends.Connect(revocation.Transport{Replica: bus.Replica(), Send: bus.Send, Peers: bus.Peers, Heard: bus.Heard})
	return nil
}

func (a *App) wakeDispatcher() {
	if d := a.dispatcher.Load(); d != nil {
		d.Wake()
	}
}

// endLocalSockets closes this replica's websockets of principal id.
func (a *App) endLocalSockets(id string) {
	reason := graph.ReasonMembershipEnds
	if strings.HasPrefix(id, ids.Session) {
		reason = graph.ReasonSessionClosed
	}
	a.principals.End(id, reason)
}

// publisher is where the voucher service sends committed changes.
func (a *App) publisher() pubsub.Publisher {
	if a.notifier == nil {
		return a.Hub
	}
	return pubsub.Publishers{a.Hub, a.notifier}
}

// closePubsub stops listening and ends every subscription (their sockets
// are closed by the HTTP server's shutdown).
func (a *App) closePubsub(ctx context.Context) {
	if a.notifier != nil {
		// After every writer stopped: what is queued goes out, then the
		// goodbye that spares the other replicas a resync.
		if err := a.notifier.Close(ctx); err != nil {
			a.Log.Warn("change notifier did not close cleanly", "err", err.Error())
		}
	}
	if a.listener != nil {
		_ = a.listener.Close()
	}
	if a.Hub != nil {
		a.Hub.Close()
	}
}
