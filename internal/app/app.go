// Package app assembles the service from its configuration: storage,
// services, the two doors and the background workers. cmd/voucherd runs it;
// tests build the same App.
package app

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/voucherd/voucherd/graph"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/config"
	"github.com/voucherd/voucherd/internal/httpx"
	"github.com/voucherd/voucherd/internal/identity"
	"github.com/voucherd/voucherd/internal/password"
	"github.com/voucherd/voucherd/internal/secretbox"
	"github.com/voucherd/voucherd/internal/session"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/rest"
)

// App is the assembled service.
type App struct {
	Config *config.Config
	Log    *slog.Logger
	DB     *storage.DB

	Issuer   *auth.Issuer
	Box      secretbox.Key
	Sessions *session.Service
	Identity *identity.Service

	handler http.Handler
	wg      sync.WaitGroup
	stop    context.CancelFunc
}

// Clock is the time source; tests replace it.
type Clock func() time.Time

// New opens storage, migrates it and builds every service.
func New(ctx context.Context, cfg *config.Config, log *slog.Logger) (*App, error) {
	db, err := storage.Open(ctx, cfg.DatabaseURL, storage.Options{MaxOpenConns: cfg.DBMaxConns})
	if err != nil {
		return nil, err
	}
	a := &App{Config: cfg, Log: log, DB: db}
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
	hasher, err := password.New(password.DefaultParams)
	if err != nil {
		return err
	}

	a.Sessions = session.NewService(db, cfg.SessionTTL, nil)
	a.Identity = identity.NewService(db, hasher, a.Issuer, a.Sessions)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := httpx.NewMetrics(reg)

	gql := graph.NewHandler(&graph.Resolver{
		Client:   db.Client,
		Identity: a.Identity,
		Sessions: a.Sessions,
	}, graph.Options{Log: a.Log, Verifier: a.Issuer, Development: cfg.IsDevelopment()})

	mux := http.NewServeMux()
	rest.Register(mux, rest.Services{
		Identity: a.Identity,
		Sessions: a.Sessions,
	}, rest.Options{Log: a.Log})
	mux.Handle("/graphql", gql)
	if cfg.IsDevelopment() {
		mux.Handle("GET /graphiql", gql)
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
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", httpx.NotFound)
	a.handler = httpx.Middleware(a.Log, metrics, auth.Middleware(a.Issuer, httpx.Routes(mux)))
	return nil
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

// Handler is the whole HTTP surface.
func (a *App) Handler() http.Handler { return a.handler }

// Start runs the background workers until Shutdown.
func (a *App) Start(ctx context.Context) {
	ctx, a.stop = context.WithCancel(ctx)
	a.every(ctx, "sweeper", a.Config.SweepInterval, a.sweep)
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

// sweep records expiries. It is idempotent, so replicas sweeping at once
// only repeat each other's no-ops; on PostgreSQL an advisory lock keeps it to
// one replica at a time.
func (a *App) sweep(ctx context.Context) error {
	return a.DB.WithTryLock(ctx, storage.LockSweeper, func(ctx context.Context) error {
		_, err := a.Sessions.SweepExpired(ctx)
		return err
	})
}

// Shutdown stops the background workers and closes storage.
func (a *App) Shutdown(ctx context.Context) error {
	if a.stop != nil {
		a.stop()
	}
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return a.DB.Close()
}
