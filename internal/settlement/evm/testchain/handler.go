package testchain

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/ethereum/go-ethereum/rpc"
)

// maxBody bounds one JSON-RPC request body served by Handler.
const maxBody = 8 << 20

type rpcRequest struct {
	ID     json.RawMessage   `json:"id"`
	Method string            `json:"method"`
	Params []json.RawMessage `json:"params"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// Handler serves the eth_, net_ and web3_ methods of an in-process RPC
// client (a Sim's) as Ethereum JSON-RPC over HTTP, single calls and
// batches, so anything that speaks JSON-RPC (the service's adapter, a
// wallet, ethers, cast) can use the simulated chain. afterSend, when not
// nil, runs after each successful eth_sendRawTransaction (the dev chain
// seals a block there).
func Handler(c *rpc.Client, afterSend func()) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "JSON-RPC wants POST", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil || len(body) > maxBody {
			http.Error(w, "request too large", http.StatusRequestEntityTooLarge)
			return
		}
		body = bytes.TrimSpace(body)
		batch := len(body) > 0 && body[0] == '['
		var reqs []rpcRequest
		if batch {
			err = json.Unmarshal(body, &reqs)
		} else {
			var one rpcRequest
			err = json.Unmarshal(body, &one)
			reqs = []rpcRequest{one}
		}
		if err != nil {
			writeJSON(w, rpcResponse{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &rpcError{Code: -32700, Message: "parse error"}})
			return
		}
		resps := make([]rpcResponse, len(reqs))
		var elems []rpc.BatchElem
		var idx []int
		results := make([]json.RawMessage, len(reqs))
		for i, q := range reqs {
			resps[i] = rpcResponse{JSONRPC: "2.0", ID: q.ID}
			if !allowed(q.Method) {
				resps[i].Error = &rpcError{Code: -32601, Message: "the method " + q.Method + " does not exist/is not available"}
				continue
			}
			args := make([]any, len(q.Params))
			for j, p := range q.Params {
				args[j] = p
			}
			elems = append(elems, rpc.BatchElem{Method: q.Method, Args: args, Result: &results[i]})
			idx = append(idx, i)
		}
		if len(elems) > 0 {
			if err := c.BatchCallContext(r.Context(), elems); err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
		}
		sent := false
		for k, e := range elems {
			i := idx[k]
			if e.Error != nil {
				resps[i].Error = toRPCError(e.Error)
				continue
			}
			resps[i].Result = results[i]
			if resps[i].Result == nil {
				resps[i].Result = json.RawMessage("null")
			}
			if e.Method == "eth_sendRawTransaction" {
				sent = true
			}
		}
		if sent && afterSend != nil {
			afterSend()
		}
		if batch {
			writeJSON(w, resps)
		} else {
			writeJSON(w, resps[0])
		}
	})
}

func allowed(method string) bool {
	return strings.HasPrefix(method, "eth_") || strings.HasPrefix(method, "net_") || strings.HasPrefix(method, "web3_")
}

func toRPCError(err error) *rpcError {
	out := &rpcError{Code: -32000, Message: err.Error()}
	var re rpc.Error
	if errors.As(err, &re) {
		out.Code = re.ErrorCode()
	}
	var de rpc.DataError
	if errors.As(err, &de) {
		out.Data = de.ErrorData()
	}
	return out
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
