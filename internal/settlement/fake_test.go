package settlement_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/voucherd/voucherd/internal/settlement"
)

// fakeChain is a settlement.Chain whose blocks and transactions a test
// sets: the domain's unit tests run against it; the simulated chain runs
// the same rules against a real node (internal/settlement/evm).
type fakeChain struct {
	mu     sync.Mutex
	head   uint64
	blocks map[uint64]string
	txs    map[string]settlement.Tx
	// byBlock lists the transactions of each block (set by the detection
	// bench's scanningChain; nil elsewhere).
	byBlock map[uint64][]string
	down    bool
	// calls counts round trips; asked counts the items asked for.
	calls, asked int
	// afterHead, when set, runs once after Head answers (a block arriving
	// between two round trips of one poll).
	afterHead func()
}

func newFakeChain() *fakeChain {
	c := &fakeChain{blocks: map[uint64]string{}, txs: map[string]settlement.Tx{}}
	c.advance(100)
	return c
}

var errDown = errors.New("connection refused")

// advance adds n blocks.
func (c *fakeChain) advance(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := 0; i < n; i++ {
		c.head++
		c.blocks[c.head] = fmt.Sprintf("0xblock%d", c.head)
	}
}

// mine includes tx in a new block (the head) and returns its height.
func (c *fakeChain) mine(tx settlement.Tx) uint64 {
	c.advance(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	tx.Found = true
	tx.BlockNumber, tx.BlockHash = c.head, c.blocks[c.head]
	if tx.BlockTime.IsZero() {
		tx.BlockTime = time.Now()
	}
	c.txs[tx.Hash] = tx
	return c.head
}

// reorg replaces the blocks from height on with a fork that does not hold
// the transactions mined there, one block longer.
func (c *fakeChain) reorg(height uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h, tx := range c.txs {
		if tx.BlockNumber >= height {
			delete(c.txs, h)
		}
	}
	for h := height; h <= c.head; h++ {
		c.blocks[h] = fmt.Sprintf("0xfork%d", h)
	}
	c.head++
	c.blocks[c.head] = fmt.Sprintf("0xfork%d", c.head)
}

func (c *fakeChain) setDown(down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = down
}

func (c *fakeChain) roundTrips() (calls, asked int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls, c.asked
}

func (c *fakeChain) call(n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	c.asked += n
	if c.down {
		return errDown
	}
	return nil
}

func (c *fakeChain) ChainID(context.Context) (string, error) { return "1", c.call(1) }

func (c *fakeChain) Head(context.Context) (uint64, error) {
	if err := c.call(1); err != nil {
		return 0, err
	}
	c.mu.Lock()
	head, after := c.head, c.afterHead
	c.afterHead = nil
	c.mu.Unlock()
	if after != nil {
		after()
	}
	return head, nil
}

func (c *fakeChain) Transactions(_ context.Context, hashes []string) ([]settlement.Tx, error) {
	if err := c.call(len(hashes)); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]settlement.Tx, len(hashes))
	for i, h := range hashes {
		if tx, ok := c.txs[h]; ok {
			out[i] = tx
		} else {
			out[i] = settlement.Tx{Hash: h}
		}
	}
	return out, nil
}

func (c *fakeChain) BlockHashes(_ context.Context, heights []uint64) (map[uint64]string, error) {
	if err := c.call(len(heights)); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[uint64]string{}
	for _, h := range heights {
		if b, ok := c.blocks[h]; ok {
			out[h] = b
		}
	}
	return out, nil
}

// units is n × 10^decimals as a big.Int (n may have a fraction).
func units(n string, decimals int) *big.Int {
	r, ok := new(big.Rat).SetString(n)
	if !ok {
		panic(n)
	}
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(decimals)), nil)))
	if !r.IsInt() {
		panic(n)
	}
	return r.Num()
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
