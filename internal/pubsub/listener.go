package pubsub

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"
)

// ListenerOptions tune a Listener; zero values take the defaults.
type ListenerOptions struct {
	// MinReconnect and MaxReconnect bound lib/pq's reconnect backoff.
	MinReconnect, MaxReconnect time.Duration
	// PingInterval is how often an idle connection is checked, so a
	// silently dead one is noticed (and its gap resynced) within about this.
	PingInterval time.Duration
	// ResyncMargin reaches back before the last moment the connection was
	// known healthy, covering transactions that began earlier but committed
	// into the gap, and clock differences between replicas.
	ResyncMargin time.Duration
	Log          *slog.Logger
}

// Listener feeds a Hub from PostgreSQL: LISTEN on Channel, every
// notification (from any replica, this one included) is published to the
// hub. After a reconnect, notifications sent during the gap are gone, so the
// hub re-sends current state (Hub.Resync) for everything changed since just
// before the connection was last known good.
type Listener struct {
	pl   *pq.Listener
	hub  *Hub
	opts ListenerOptions
	stop context.CancelFunc
	wg   sync.WaitGroup
	// healthy is when the connection was last known good (unix nanos).
	healthy atomic.Int64
}

// ApplicationName tags the listener's connection in pg_stat_activity.
const ApplicationName = "voucherd-listener"

// Listen connects to databaseURL and starts feeding hub. It returns once
// LISTEN is in effect, so no change committed after it returns is missed.
func Listen(ctx context.Context, databaseURL string, hub *Hub, opts ListenerOptions) (*Listener, error) {
	if opts.MinReconnect <= 0 {
		opts.MinReconnect = 100 * time.Millisecond
	}
	if opts.MaxReconnect <= 0 {
		opts.MaxReconnect = 5 * time.Second
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = 15 * time.Second
	}
	if opts.ResyncMargin <= 0 {
		opts.ResyncMargin = time.Minute
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	u, err := url.Parse(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("pubsub: database URL is not a valid URL")
	}
	q := u.Query()
	q.Set("application_name", ApplicationName)
	u.RawQuery = q.Encode()
	log := opts.Log
	pl := pq.NewListener(u.String(), opts.MinReconnect, opts.MaxReconnect, func(ev pq.ListenerEventType, err error) {
		switch ev {
		case pq.ListenerEventDisconnected:
			log.Warn("pubsub: LISTEN connection lost; reconnecting", "err", errString(err))
		case pq.ListenerEventConnectionAttemptFailed:
			log.Warn("pubsub: LISTEN reconnect failed", "err", errString(err))
		case pq.ListenerEventReconnected:
			log.Info("pubsub: LISTEN connection re-established")
		}
	})
	listened := make(chan error, 1)
	go func() { listened <- pl.Listen(Channel) }()
	select {
	case err := <-listened:
		if err != nil {
			_ = pl.Close()
			return nil, fmt.Errorf("pubsub: LISTEN %s: %w", Channel, err)
		}
	case <-ctx.Done():
		_ = pl.Close()
		return nil, ctx.Err()
	}
	runCtx, stop := context.WithCancel(context.Background())
	l := &Listener{pl: pl, hub: hub, opts: opts, stop: stop}
	l.wg.Add(1)
	go l.run(runCtx)
	return l, nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Close stops listening and waits for in-flight work.
func (l *Listener) Close() error {
	l.stop()
	err := l.pl.Close()
	l.wg.Wait()
	return err
}

func (l *Listener) run(ctx context.Context) {
	defer l.wg.Done()
	log := l.opts.Log
	l.markHealthy()
	// Ping from its own goroutine: on a half-dead connection it can block
	// until TCP gives up, and notifications must keep flowing meanwhile.
	l.wg.Add(1)
	go l.pinger(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case n, ok := <-l.pl.Notify:
			if !ok {
				return
			}
			if n == nil {
				// lib/pq sends nil after re-establishing the connection:
				// whatever was notified in between is lost.
				since := time.Unix(0, l.healthy.Load()).Add(-l.opts.ResyncMargin)
				l.markHealthy()
				l.wg.Add(1)
				go func() {
					defer l.wg.Done()
					rctx, cancel := context.WithTimeout(ctx, time.Minute)
					defer cancel()
					if err := l.hub.Resync(rctx, since); err != nil && ctx.Err() == nil {
						log.Error("pubsub: resync after reconnect failed", "err", err.Error())
					}
				}()
				continue
			}
			l.markHealthy()
			c, err := ParseNotification(n.Extra)
			if err != nil || c.ID == "" {
				log.Error("pubsub: malformed voucher change notification", "bytes", len(n.Extra))
				continue
			}
			l.hub.Publish(c)
		}
	}
}

func (l *Listener) markHealthy() { l.healthy.Store(time.Now().UnixNano()) }

func (l *Listener) pinger(ctx context.Context) {
	defer l.wg.Done()
	t := time.NewTicker(l.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := l.pl.Ping(); err == nil {
				l.markHealthy()
			}
		}
	}
}
