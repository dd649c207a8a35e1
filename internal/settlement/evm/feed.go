package evm

import (
	"context"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"
)

// aggregatorABI is the part of Chainlink's AggregatorV3Interface a price
// feed needs.
var aggregatorABI = func() abi.ABI {
	a, err := abi.JSON(strings.NewReader(`[
 {"name":"decimals","type":"function","stateMutability":"view","inputs":[],"outputs":[{"name":"","type":"uint8"}]},
 {"name":"latestRoundData","type":"function","stateMutability":"view","inputs":[],"outputs":[
  {"name":"roundId","type":"uint80"},{"name":"answer","type":"int256"},{"name":"startedAt","type":"uint256"},
  {"name":"updatedAt","type":"uint256"},{"name":"answeredInRound","type":"uint80"}]}]`))
	if err != nil {
		panic(err)
	}
	return a
}()

type callArgs struct {
	To   common.Address `json:"to"`
	Data hexutil.Bytes  `json:"data"`
}

// LatestRound reads a Chainlink-compatible aggregator at address:
// decimals() and latestRoundData() in one batch (finance.FeedReader). The
// answer is returned as the contract gives it (it may be zero or negative:
// judging it is the caller's business).
func (c *Chain) LatestRound(ctx context.Context, address string) (*big.Int, uint8, time.Time, error) {
	if !common.IsHexAddress(address) {
		return nil, 0, time.Time{}, fmt.Errorf("feed address %q is not an address", address)
	}
	to := common.HexToAddress(address)
	var dec, round hexutil.Bytes
	elems := []rpc.BatchElem{
		{Method: "eth_call", Args: []any{callArgs{To: to, Data: aggregatorABI.Methods["decimals"].ID}, "latest"}, Result: &dec},
		{Method: "eth_call", Args: []any{callArgs{To: to, Data: aggregatorABI.Methods["latestRoundData"].ID}, "latest"}, Result: &round},
	}
	if err := c.batch(ctx, elems); err != nil {
		return nil, 0, time.Time{}, err
	}
	dv, err := aggregatorABI.Unpack("decimals", dec)
	if err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("feed %s: decimals(): %w (not an aggregator?)", address, err)
	}
	rv, err := aggregatorABI.Unpack("latestRoundData", round)
	if err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("feed %s: latestRoundData(): %w (not an aggregator?)", address, err)
	}
	decimals := dv[0].(uint8)
	answer := rv[1].(*big.Int)
	updated := rv[3].(*big.Int)
	if !updated.IsInt64() {
		return nil, 0, time.Time{}, fmt.Errorf("feed %s: updatedAt %s out of range", address, updated)
	}
	return answer, decimals, time.Unix(updated.Int64(), 0).UTC(), nil
}
