package solana

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/voucherd/voucherd/internal/chain"
	"github.com/voucherd/voucherd/internal/settlement"
)

// SignaturesPage is the most signatures one getSignaturesForAddress call
// returns (the node's maximum).
const SignaturesPage = 1000

// maxParallel bounds the batches one Detect has in flight at once.
const maxParallel = 16

var _ settlement.Detector = (*Chain)(nil)

type signatureInfo struct {
	Signature string          `json:"signature"`
	Slot      uint64          `json:"slot"`
	Err       json.RawMessage `json:"err"`
}

// Detect implements settlement.Detector with Solana Pay references: a
// watch's Address is a checkout's reference key, which the payer's wallet
// adds to the transfer instruction as a read-only account, so the node
// lists the transaction under that key. Detect asks getSignaturesForAddress
// (commitment confirmed) for every distinct reference at once: batches of
// at most MaxBatch calls sent side by side, so one round trip of latency
// whatever the number of references. minContextSlot is upTo: a node that
// has not yet seen upTo (a lagging replica behind a load balancer) answers
// an error instead of a short list, since the caller never asks again
// below upTo.
//
// The list names every transaction that mentions the reference, whatever it
// moved (anyone may mention a public key), so a Found here means "mentions
// the checkout's reference"; the watcher's lookup (Transactions) and the
// settlement rules decide whether it pays the due mint or SOL to the
// payee. Transactions that failed (err set) moved nothing and are left out,
// as are those outside (after, upTo]. A reference with a full page still
// inside the range is paged further (before: the oldest signature) in
// another round trip: only a reference with more than SignaturesPage
// mentions in the range costs one.
func (c *Chain) Detect(ctx context.Context, after, upTo uint64, watches []settlement.Watch) ([]settlement.Found, error) {
	if len(watches) == 0 || upTo <= after {
		return nil, nil
	}
	// Each distinct reference is asked once, for every watch on it.
	byRef := map[string][]settlement.Watch{}
	var refs []string
	for _, w := range watches {
		if _, ok := byRef[w.Address]; !ok {
			if !ValidReference(w.Address) {
				return nil, fmt.Errorf("reference %q: want base58 of 32 bytes", w.Address)
			}
			refs = append(refs, w.Address)
		}
		if !slices.Contains(byRef[w.Address], w) {
			byRef[w.Address] = append(byRef[w.Address], w)
		}
	}

	type hit struct {
		sig   string
		slot  uint64
		order int // position in the node's newest-first list
	}
	hits := map[string][]hit{}
	before := map[string]string{} // reference → signature to page before
	for todo := refs; len(todo) > 0; {
		pages := make([][]signatureInfo, len(todo))
		calls := make([]*call, len(todo))
		for i, ref := range todo {
			opt := map[string]any{"commitment": "confirmed", "limit": SignaturesPage, "minContextSlot": upTo}
			if b := before[ref]; b != "" {
				opt["before"] = b
			}
			calls[i] = &call{method: "getSignaturesForAddress", params: []any{ref, opt}, result: &pages[i]}
		}
		if err := c.parallel(ctx, calls); err != nil {
			return nil, err
		}
		var more []string
		for i, ref := range todo {
			if cl := calls[i]; cl.err != nil {
				return nil, fmt.Errorf("getSignaturesForAddress %s: %w", ref, cl.err)
			}
			page := pages[i]
			for _, s := range page {
				if !validSignature(s.Signature) {
					return nil, fmt.Errorf("getSignaturesForAddress %s: malformed signature %q", ref, s.Signature)
				}
				if s.Slot <= after || s.Slot > upTo || !isNull(s.Err) {
					continue
				}
				hits[ref] = append(hits[ref], hit{sig: s.Signature, slot: s.Slot, order: len(hits[ref])})
			}
			// Newest first: when the oldest of a full page is still in
			// the range, older ones may be too.
			if len(page) == SignaturesPage && page[len(page)-1].Slot > after {
				before[ref] = page[len(page)-1].Signature
				more = append(more, ref)
			}
		}
		todo = more
	}

	type ranked struct {
		f     settlement.Found
		order int
	}
	var found []ranked
	type key struct {
		sig string
		w   settlement.Watch
	}
	seen := map[key]bool{}
	for _, ref := range refs {
		for _, h := range hits[ref] {
			for _, w := range byRef[ref] {
				if k := (key{h.sig, w}); !seen[k] {
					seen[k] = true
					found = append(found, ranked{settlement.Found{Hash: h.sig, Watch: w, BlockNumber: h.slot}, h.order})
				}
			}
		}
	}
	// Chain order: by slot, and within a slot oldest first (the node lists
	// newest first).
	slices.SortStableFunc(found, func(a, b ranked) int {
		if c := cmp.Compare(a.f.BlockNumber, b.f.BlockNumber); c != 0 {
			return c
		}
		return cmp.Compare(b.order, a.order)
	})
	out := make([]settlement.Found, len(found))
	for i, r := range found {
		out[i] = r.f
	}
	return out, nil
}

// parallel sends calls as batches of at most MaxBatch, side by side (at
// most maxParallel at once): the latency of one round trip for up to
// MaxBatch×maxParallel calls. A transport error fails the whole lookup, as
// batch does.
func (c *Chain) parallel(ctx context.Context, calls []*call) error {
	var chunks [][]*call
	for len(calls) > 0 {
		n := min(len(calls), MaxBatch)
		chunks = append(chunks, calls[:n])
		calls = calls[n:]
	}
	if len(chunks) == 1 {
		return c.send(ctx, chunks[0])
	}
	errs := make([]error, len(chunks))
	sem := make(chan struct{}, maxParallel)
	var wg sync.WaitGroup
	for i, ch := range chunks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = c.send(ctx, ch)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// ValidReference reports whether s is a Solana Pay reference: base58 of
// exactly 32 bytes.
func ValidReference(s string) bool {
	if s == "" || len(s) > 44 {
		return false
	}
	b, err := chain.DecodeBase58(s)
	return err == nil && len(b) == 32
}
