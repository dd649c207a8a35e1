package pubsub

import "github.com/prometheus/client_golang/prometheus"

// Collectors exposes the hub's counters to Prometheus.
func Collectors(h *Hub) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "voucherd_subscriptions",
			Help: "voucherUpdated subscriptions open on this replica.",
		}, func() float64 { return float64(h.Stats().Subscriptions) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "voucherd_subscription_events_total",
			Help: "Voucher states handed to subscribers on this replica.",
		}, func() float64 { return float64(h.Stats().Delivered) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "voucherd_subscriptions_dropped_total",
			Help: "Subscriptions ended because their reader fell behind.",
		}, func() float64 { return float64(h.Stats().Dropped) }),
	}
}
