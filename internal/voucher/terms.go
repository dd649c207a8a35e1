package voucher

import (
	"sync"
	"time"

	"github.com/voucherd/voucherd/ent"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/payment"
)

// termsGeneration is how many vouchers' terms one generation of the
// terms cache holds; the cache holds at most two generations (a few hundred
// bytes an entry: a few MB at most, allocated as entries come). A
// voucher's terms survive at least termsGeneration other vouchers newly
// kept after its own last sighting: seconds even at a thousand redeems a
// second, typically longer than a wallet takes from the redeem (or its
// GET) to its negotiation. An entry gone costs only the read of before.
const termsGeneration = 8192

// terms are what negotiate reads from a voucher: its payer, type and
// expected payment, and its expiry. None of them changes once the voucher
// is REDEEMED: the payer and the expiry are set at reserve (the business
// too, and only vouchers without one are kept), the type and the expected
// payment by the redeem; afterwards a REDEEMED voucher is only negotiated
// (supplied payment, exchange rate), resolved or discarded (its state), and
// no transition leads back to REDEEMED (docs/vouchers.md, "Negotiate in one
// statement"). Ids are never reused, so an id's terms, once seen in a
// REDEEMED row, are the terms of every REDEEMED row of that id.
type terms struct {
	payerID   string
	expected  payment.Payment // a copy: all value fields
	expiresAt time.Time
}

// termsOf returns v's terms when they may be kept: a SIMPLE voucher
// without a business, REDEEMED as stored. A CUSTOM voucher is not kept (its
// negotiation is refused, and that needs the read's order of errors), nor
// a business voucher (its transitions run in a transaction with its events
// and check the membership and the business's status).
func termsOf(v *ent.Voucher) (terms, bool) {
	if v == nil || v.BusinessID != nil || v.Status != entvoucher.StatusREDEEMED ||
		v.Type == nil || *v.Type != entvoucher.TypeSIMPLE || v.ExpectedPayment == nil {
		return terms{}, false
	}
	return terms{payerID: v.PayerID, expected: *v.ExpectedPayment, expiresAt: v.ExpiresAt}, true
}

// voucher is a fresh voucher holding only t (and id): what a transition
// whose fromTerms is set may read.
func (t terms) voucher(id string) *ent.Voucher {
	typ := entvoucher.TypeSIMPLE
	exp := t.expected
	return &ent.Voucher{
		ID: id, Status: entvoucher.StatusREDEEMED, Type: &typ, PayerID: t.payerID,
		ExpectedPayment: &exp, ExpiresAt: t.expiresAt,
	}
}

// termsCache remembers the terms of the REDEEMED vouchers this replica has
// seen (redeemed, read, negotiated), by id, so negotiate can quote without
// reading the row and run as one statement. A stale entry is harmless: the
// statement still holds the voucher's state, payer and expiry in its WHERE,
// and when it changes nothing the caller takes the read path.
//
// Memory is bounded with O(1) work and no goroutine: entries go into the
// current generation; when it is full it becomes the old one (the previous
// old one is dropped whole) and a new one starts. Lookups see both.
type termsCache struct {
	size int
	mu   sync.RWMutex
	cur  map[string]terms
	old  map[string]terms
}

func newTermsCache(size int) *termsCache {
	return &termsCache{size: size, cur: make(map[string]terms)}
}

// get returns id's terms, if kept.
func (c *termsCache) get(id string) (terms, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if t, ok := c.cur[id]; ok {
		return t, true
	}
	t, ok := c.old[id]
	return t, ok
}

// observe keeps v's terms when v is a REDEEMED voucher termsOf keeps, and
// forgets v's id once v is RESOLVED or DISCARDED (no use keeping it). A
// voucher already in the current generation costs a read lock only.
func (c *termsCache) observe(v *ent.Voucher) {
	if v == nil {
		return
	}
	t, ok := termsOf(v)
	if !ok {
		if v.Status == entvoucher.StatusRESOLVED || v.Status == entvoucher.StatusDISCARDED {
			c.forget(v.ID)
		}
		return
	}
	c.mu.RLock()
	_, fresh := c.cur[v.ID]
	c.mu.RUnlock()
	if fresh {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cur) >= c.size {
		c.old, c.cur = c.cur, make(map[string]terms)
	}
	c.cur[v.ID] = t
}

// forget drops id's terms.
func (c *termsCache) forget(id string) {
	c.mu.RLock()
	_, inCur := c.cur[id]
	_, inOld := c.old[id]
	c.mu.RUnlock()
	if !inCur && !inOld {
		return
	}
	c.mu.Lock()
	delete(c.cur, id)
	delete(c.old, id)
	c.mu.Unlock()
}

// len is how many entries the cache holds (both generations; an id in both
// counts twice).
func (c *termsCache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.cur) + len(c.old)
}
