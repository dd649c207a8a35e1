package deposit

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"fmt"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/rpc"
)

// Deployment is a factory creation sent by Deploy.
type Deployment struct {
	Deployer common.Address
	Tx       common.Hash
	Factory  common.Address // where the factory is (or will be) created
}

// Deploy sends the factory's creation from key's account (at its next
// nonce, so the address follows from the account and that nonce), waits
// for the receipt (polling every poll until ctx ends) and checks the new
// factory (Verify). sent, when not nil, is told the transaction as soon as
// the node took it.
func Deploy(ctx context.Context, c *rpc.Client, key *ecdsa.PrivateKey, poll time.Duration, sent func(Deployment)) (Deployment, error) {
	from := crypto.PubkeyToAddress(key.PublicKey)
	d := Deployment{Deployer: from}
	var id hexutil.Big
	var nonce hexutil.Uint64
	var gas hexutil.Uint64
	elems := []rpc.BatchElem{
		{Method: "eth_chainId", Result: &id},
		{Method: "eth_getTransactionCount", Args: []any{from, "pending"}, Result: &nonce},
		{Method: "eth_estimateGas", Args: []any{map[string]any{"from": from, "data": hexutil.Bytes(FactoryCode)}}, Result: &gas},
	}
	if err := c.BatchCallContext(ctx, elems); err != nil {
		return d, err
	}
	for _, e := range elems {
		if e.Error != nil {
			return d, fmt.Errorf("%s: %w", e.Method, e.Error)
		}
	}
	s := &Sweeper{rpc: c}
	fee, err := s.fees(ctx)
	if err != nil {
		return d, err
	}
	signer := types.LatestSignerForChainID((*big.Int)(&id))
	tx, err := types.SignTx(types.NewTx(&types.DynamicFeeTx{
		ChainID: signer.ChainID(), Nonce: uint64(nonce), GasTipCap: fee.tip, GasFeeCap: fee.cap,
		Gas: uint64(gas) + uint64(gas)/4, Data: FactoryCode,
	}), signer, key)
	if err != nil {
		return d, err
	}
	raw, err := tx.MarshalBinary()
	if err != nil {
		return d, err
	}
	d.Tx, d.Factory = tx.Hash(), crypto.CreateAddress(from, uint64(nonce))
	if err := c.CallContext(ctx, nil, "eth_sendRawTransaction", hexutil.Bytes(raw)); err != nil {
		return d, fmt.Errorf("sending the factory's creation: %w", err)
	}
	if sent != nil {
		sent(d)
	}
	for {
		var rc json.RawMessage
		if err := c.CallContext(ctx, &rc, "eth_getTransactionReceipt", d.Tx); err != nil {
			return d, err
		}
		if !isNull(rc) {
			var r receipt
			if err := json.Unmarshal(rc, &r); err != nil {
				return d, err
			}
			if r.Status == nil || *r.Status != 1 {
				return d, fmt.Errorf("the factory's creation %s reverted", d.Tx.Hex())
			}
			return d, Verify(ctx, c, d.Factory)
		}
		select {
		case <-ctx.Done():
			return d, fmt.Errorf("the factory's creation %s not mined yet: %w", d.Tx.Hex(), ctx.Err())
		case <-time.After(poll):
		}
	}
}
