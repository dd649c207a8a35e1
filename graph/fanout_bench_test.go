package graph_test

import (
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/voucher"
)

// BenchmarkFanoutRender measures one voucher change delivered to 200
// voucherUpdated subscribers of one session with one selection: the
// engine renders it once and every subscriber's websocket sends the
// shared bytes. An op is one change (a negotiation, as in
// BenchmarkCommitToSubscriber) until every subscriber has received it.
// The subscribers' clients run in this process, so allocs/op and B/op
// hold their reading too (the same for any server code): compare builds
// of the server by them, which machine load does not change.
//
//	go test ./graph -run '^$' -bench FanoutRender -benchmem
func BenchmarkFanoutRender(b *testing.B) {
	const subs = 200
	h := newHarness(b, storage.SQLite, harnessOptions{})
	payer := h.device()
	ses, payee := h.session(payer)
	v := h.reserve(payee, ses.Code, nil)
	h.redeem(payee, v.ID, "10")
	clients := make([]*wsClient, subs)
	for i := range clients {
		c := dialWS(b, h.ws, transportWS)
		c.init(payer.token)
		c.subscribe("s", sessionSub, map[string]any{"s": ses.ID})
		clients[i] = c
	}
	waitFor(b, time.Minute, func() bool { return h.hub.Stats().Subscriptions == subs })
	in := voucher.NegotiateInput{SuppliedPayment: &voucher.PaymentInput{Network: "ethereum", Currency: "USDT",
		CurrencyAddress: "0xdAC17F958D2ee523a2206206994597C13D831ec7", Amount: "1",
		Wallet: &voucher.WalletInput{Address: payeeWallet}}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := h.vouchers.Negotiate(payer.ctx(), v.ID, in)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range clients {
			for {
				var ev struct{ VoucherUpdated struct{ Version int } }
				c.result("s", 10*time.Second, &ev)
				if ev.VoucherUpdated.Version >= r.Version {
					break
				}
			}
		}
	}
}
