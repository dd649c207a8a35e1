// Command voucherd runs the payment voucher service: REST under /api/v1,
// GraphQL (with websocket subscriptions) at /graphql, health at /healthz and
// /readyz, and Prometheus metrics at /metrics.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/voucherd/voucherd/internal/config"
)

// subcommands are voucherd's other jobs, by their first argument; with no
// subcommand it serves.
var subcommands = map[string]func(args []string) error{
	"deploy-factory": func(args []string) error { return deployFactory(args, os.Stdout) },
	// The dev chain make run pays on (devchain.go).
	"devchain": devchain,
}

func main() {
	if len(os.Args) > 1 {
		if sub, ok := subcommands[os.Args[1]]; ok {
			if err := sub(os.Args[2:]); err != nil {
				fmt.Fprintf(os.Stderr, "voucherd %s: %v\n", os.Args[1], err)
				os.Exit(1)
			}
			return
		}
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "voucherd:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := config.FromEnvironment()
	if err != nil {
		return err
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	log := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// Both addresses are bound before the app starts: a taken port then
	// fails the start before this replica has announced itself to the
	// others (its notifier says "alive" on start), rather than leaving
	// them to notice its silence and resync.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	var pprofLn net.Listener
	if cfg.PprofAddr != "" {
		if pprofLn, err = net.Listen("tcp", cfg.PprofAddr); err != nil {
			return fmt.Errorf("VOUCHER_PPROF_ADDR: %w", err)
		}
		defer pprofLn.Close()
	}

	a, err := newApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Addr:              cfg.Addr,
		Handler:           a.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(a.BeginShutdown)
	a.Start(ctx)
	if pprofLn != nil {
		servePprof(ctx, pprofLn, log)
	}
	log.Info("voucherd listening", "addr", ln.Addr().String(), "database", a.DB.URL, "env", cfg.Env)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	case <-ctx.Done():
	}

	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	// Shutdown drains HTTP requests; websockets are detached from them, and
	// App.Shutdown closes each with a close frame (1001).
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("http shutdown", "err", err.Error())
	}
	if err := a.Shutdown(sctx); err != nil {
		log.Warn("shutdown", "err", err.Error())
	}
	log.Info("stopped")
	return nil
}

// servePprof serves the profiling endpoints on their own listener, so they
// are reachable only where the operator put them (make bench uses a
// loopback port) and never through the API address.
func servePprof(ctx context.Context, ln net.Listener, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof server", "err", err.Error())
		}
	}()
	log.Info("pprof listening", "addr", ln.Addr().String())
}
