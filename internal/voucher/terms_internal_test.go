package voucher

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/payment"
)

func redeemedRow(id string) *ent.Voucher {
	typ := entvoucher.TypeSIMPLE
	return &ent.Voucher{
		ID: id, Status: entvoucher.StatusREDEEMED, Type: &typ, PayerID: "dev_payer", PayeeID: "vss_payee",
		ExpiresAt: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC),
		ExpectedPayment: &payment.Payment{
			ID: "pmt_" + id, Network: "ethereum", Currency: "USDC", CurrencyAddress: "0xA0b8", Amount: "1",
			Wallet: payment.Wallet{Address: "0x5aAe"},
		},
	}
}

// Filled far past its size the cache holds at most two generations, and
// keeps the most recent entries.
func TestTermsCacheIsBounded(t *testing.T) {
	const size = 16
	c := newTermsCache(size)
	for i := 0; i < 100*size; i++ {
		c.observe(redeemedRow(fmt.Sprintf("vch_%d", i)))
		if n := c.len(); n > 2*size {
			t.Fatalf("after %d vouchers the cache holds %d entries, bound %d", i+1, n, 2*size)
		}
	}
	for i := 100*size - size; i < 100*size; i++ {
		if _, ok := c.get(fmt.Sprintf("vch_%d", i)); !ok {
			t.Fatalf("vch_%d, among the last %d seen, is not kept", i, size)
		}
	}
	if _, ok := c.get("vch_0"); ok {
		t.Fatal("the first voucher is still kept after 100 generations")
	}
	// Seeing a kept voucher again does not grow the cache.
	n := c.len()
	for i := 0; i < 10; i++ {
		c.observe(redeemedRow(fmt.Sprintf("vch_%d", 100*size-1)))
	}
	if c.len() != n {
		t.Fatalf("seeing one voucher again grew the cache from %d to %d", n, c.len())
	}
}

// Only REDEEMED SIMPLE vouchers without a business are kept; a voucher
// seen RESOLVED or DISCARDED is forgotten.
func TestTermsCacheKeepsOnlyRedeemedSimple(t *testing.T) {
	c := newTermsCache(8)
	business := redeemedRow("vch_b")
	b := "bus_1"
	business.BusinessID = &b
	custom := redeemedRow("vch_c")
	ct := entvoucher.TypeCUSTOM
	custom.Type = &ct
	custom.ExpectedPayment = nil
	reserved := redeemedRow("vch_r")
	reserved.Status = entvoucher.StatusRESERVED
	for _, v := range []*ent.Voucher{business, custom, reserved, nil} {
		c.observe(v)
	}
	if c.len() != 0 {
		t.Fatalf("kept %d vouchers that are not REDEEMED SIMPLE without a business", c.len())
	}
	for _, st := range []entvoucher.Status{entvoucher.StatusRESOLVED, entvoucher.StatusDISCARDED} {
		c.observe(redeemedRow("vch_x"))
		if _, ok := c.get("vch_x"); !ok {
			t.Fatal("a REDEEMED SIMPLE voucher was not kept")
		}
		gone := redeemedRow("vch_x")
		gone.Status = st
		c.observe(gone)
		if _, ok := c.get("vch_x"); ok || c.len() != 0 {
			t.Fatalf("a voucher seen %s is still kept", st)
		}
	}
}

// What is kept is a copy: changing the row it came from, or the voucher a
// lookup hands out, changes nothing kept.
func TestTermsCacheKeepsCopies(t *testing.T) {
	c := newTermsCache(8)
	row := redeemedRow("vch_1")
	c.observe(row)
	row.ExpectedPayment.Amount = "999"
	row.ExpectedPayment.Wallet.Address = "0xdead"
	row.PayerID = "dev_other"
	*row.Type = entvoucher.TypeCUSTOM
	kept, ok := c.get("vch_1")
	if !ok {
		t.Fatal("not kept")
	}
	v := kept.voucher("vch_1")
	want := redeemedRow("vch_1")
	if *v.ExpectedPayment != *want.ExpectedPayment || v.PayerID != want.PayerID || *v.Type != entvoucher.TypeSIMPLE ||
		!v.ExpiresAt.Equal(want.ExpiresAt) || v.Status != entvoucher.StatusREDEEMED || v.ID != "vch_1" {
		t.Fatalf("kept %+v, want the terms as first seen", v)
	}
	v.ExpectedPayment.Amount = "7"
	*v.Type = entvoucher.TypeCUSTOM
	again, _ := c.get("vch_1")
	if w := again.voucher("vch_1"); w.ExpectedPayment.Amount != "1" || *w.Type != entvoucher.TypeSIMPLE {
		t.Fatalf("a handed-out voucher changed what is kept: %+v", w)
	}
}

// Concurrent use (run with -race).
func TestTermsCacheConcurrentUse(t *testing.T) {
	c := newTermsCache(32)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				id := fmt.Sprintf("vch_%d", (g*131+i)%200)
				switch i % 3 {
				case 0:
					c.observe(redeemedRow(id))
				case 1:
					if kept, ok := c.get(id); ok && kept.expected.ID != "pmt_"+id {
						t.Errorf("%s kept the terms of %s", id, kept.expected.ID)
					}
				default:
					gone := redeemedRow(id)
					gone.Status = entvoucher.StatusRESOLVED
					c.observe(gone)
				}
			}
		}()
	}
	wg.Wait()
	if n := c.len(); n > 64 {
		t.Fatalf("%d entries, bound 64", n)
	}
}
