package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/gorilla/websocket"

	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
	"github.com/voucherd/voucherd/testsupport/testnats"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

// A payer's wallet subscribed to voucherUpdated over a real websocket
// (graphql-transport-ws) on the real binary is pushed the voucher's
// settlement at each change the chain drives: the resolve (PENDING, the
// transaction not mined), the payment mined (PENDING, 1 confirmation),
// then CONFIRMED at 2 confirmations. The chain is go-ethereum's simulated
// one served over JSON-RPC, so blocks come exactly when the test commits
// them; on SQLite and PostgreSQL, and across two replicas on PostgreSQL
// over each cross-replica transport.
func TestSettlementPushedOnVoucherUpdated(t *testing.T) {
	ctx := context.Background()
	owner, payer := testchain.DevAccount(0), testchain.DevAccount(1)
	payee := common.HexToAddress("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC")
	sim := testchain.NewSim(owner.Address, payer.Address)
	defer sim.Close()
	node := httptest.NewServer(testchain.Handler(sim.RPC, nil))
	defer node.Close()
	mined := func(h common.Hash) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for {
			sim.Commit()
			if _, err := sim.Client.TransactionReceipt(cctx, h); err == nil {
				return
			}
			select {
			case <-cctx.Done():
				t.Fatalf("transaction %s not mined", h.Hex())
			case <-time.After(5 * time.Millisecond): // the node's pool takes it in asynchronously
			}
		}
	}
	h, err := testchain.Send(ctx, sim.Client, owner, nil, nil, testchain.DeployTokenData("USD Coin", "USDC", 6), 0)
	if err != nil {
		t.Fatal(err)
	}
	mined(h)
	rc, err := sim.Client.TransactionReceipt(ctx, h)
	if err != nil || rc.Status != 1 {
		t.Fatalf("deploy: %v %v", rc, err)
	}
	token := rc.ContractAddress
	if h, err = testchain.Send(ctx, sim.Client, owner, &token, nil, testchain.MintData(payer.Address, big.NewInt(1_000_000_000)), 0); err != nil {
		t.Fatal(err)
	}
	mined(h)
	financeFile := writeFile(t, fmt.Sprintf(`{
  "updatedAt": "2026-01-01T00:00:00.000Z",
  "networks": [{"network": "local", "type": "evm", "chainId": "1337", "rpcUrl": %q, "confirmations": 2, "pollInterval": "100ms"}],
  "tokens": [{"network": "local", "currency": "USDC", "currencyAddress": %q, "decimals": 6, "native": false}],
  "prices": {"USDC": "1"}
}`, node.URL, token.Hex()))

	// On PostgreSQL also two replicas, both watching the chain, the
	// subscriber on the second and every request on the first: whichever
	// replica's watcher records a change, the subscriber is pushed it
	// (over LISTEN/NOTIFY, or NATS).
	setups := []struct{ name, dialect, transport string }{{"sqlite", "sqlite", ""}, {"postgres", "postgres", ""}}
	for _, tr := range testnats.Transports {
		setups = append(setups, struct{ name, dialect, transport string }{"postgres-2-replicas/" + tr, "postgres", tr})
	}
	for _, setup := range setups {
		t.Run(setup.name, func(t *testing.T) {
			env := map[string]string{"VOUCHER_FINANCE_FILE": financeFile}
			if setup.transport != "" {
				maps.Copy(env, testnats.Env(t, setup.transport))
			}
			s := testserver.Start(t, testserver.Options{Dialect: setup.dialect, Env: env})
			watched := s
			if setup.transport != "" {
				watched = testserver.Start(t, testserver.Options{Dialect: setup.dialect, DatabaseURL: s.DatabaseURL, Env: env})
			}
			wallet := s.Device(t)
			_, code := s.Session(t, wallet)
			payeeID := s.Resource(t, code)
			id := s.Reserve(t, payeeID.Token, map[string]any{"code": code})
			r := s.Do(t, "POST", "/api/v1/vouchers/"+id+"/redeem-voucher", payeeID.Token, map[string]any{"expectedPayment": map[string]any{
				"network": "local", "currency": "USDC", "currencyAddress": token.Hex(), "amount": "4.2",
				"wallet": map[string]any{"address": payee.Hex()},
			}})
			if r.Status != 200 {
				t.Fatalf("redeem-voucher: %d %s", r.Status, r.Body)
			}
			var v struct {
				ExpectedPayment struct{ ID string } `json:"expectedPayment"`
			}
			r.JSON(t, &v)

			ws := subscribeVoucher(t, watched.URL, wallet.Token, id)
			defer ws.Close()
			// A subscription by id starts with the current state: once it
			// is here, the subscription is live.
			if got := nextPush(t, ws, func(push) bool { return true }); got.Status != "REDEEMED" || got.Settlement != nil {
				t.Fatalf("current state: %+v", got)
			}

			h, err := testchain.Send(ctx, sim.Client, payer, &token, nil, testchain.TransferData(payee, big.NewInt(4_200_000)), 0)
			if err != nil {
				t.Fatal(err)
			}
			r = s.Do(t, "POST", "/api/v1/vouchers/"+id+"/resolve-voucher", wallet.Token, map[string]any{
				"receipts": []map[string]any{{"paymentId": v.ExpectedPayment.ID, "transactionHash": h.Hex()}},
			})
			if r.Status != 200 {
				t.Fatalf("resolve-voucher: %d %s", r.Status, r.Body)
			}
			hash := strings.ToLower(h.Hex())

			// The resolve: RESOLVED, settlement PENDING, the payment not mined.
			got := nextPush(t, ws, func(p push) bool { return p.Status == "RESOLVED" })
			want(t, got, "PENDING", 0, "PENDING", hash, "")
			version := got.Version

			// Mined: pushed as PENDING with one confirmation and the chain's amount.
			mined(h)
			got = nextPush(t, ws, func(p push) bool { return p.Version > version })
			want(t, got, "PENDING", 1, "MINED", hash, "4.2")
			version = got.Version

			// One more block: CONFIRMED.
			sim.Commit()
			got = nextPush(t, ws, func(p push) bool { return p.Version > version })
			want(t, got, "CONFIRMED", 2, "CONFIRMED", hash, "4.2")
		})
	}
}

// push is a voucherUpdated payload.
type push struct {
	ID         string `json:"id"`
	Version    int    `json:"version"`
	Status     string `json:"status"`
	Settlement *struct {
		Status        string `json:"status"`
		Verified      bool   `json:"verified"`
		Confirmations int    `json:"confirmations"`
		PaidAmount    string `json:"paidAmount"`
		Transactions  []struct {
			TransactionHash string `json:"transactionHash"`
			Status          string `json:"status"`
			Confirmations   int    `json:"confirmations"`
		} `json:"transactions"`
	} `json:"settlement"`
}

func want(t *testing.T, p push, status string, confirmations int, txStatus, hash, paid string) {
	t.Helper()
	s := p.Settlement
	if p.Status != "RESOLVED" || s == nil || !s.Verified || s.Status != status || s.Confirmations != confirmations ||
		s.PaidAmount != paid || len(s.Transactions) != 1 || s.Transactions[0].Status != txStatus ||
		strings.ToLower(s.Transactions[0].TransactionHash) != hash {
		b, _ := json.Marshal(p)
		t.Fatalf("pushed %s, want settlement %s with %d confirmations, transaction %s, paid %q", b, status, confirmations, txStatus, paid)
	}
}

const voucherUpdatedQuery = `subscription ($id: ID) { voucherUpdated(id: $id) { id version status settlement {
  status verified confirmations paidAmount transactions { transactionHash status confirmations } } } }`

// subscribeVoucher opens a graphql-transport-ws socket as token and
// subscribes to the voucher's updates.
func subscribeVoucher(t *testing.T, base, token, id string) *websocket.Conn {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(base, "http")+"/graphql",
		http.Header{"Sec-WebSocket-Protocol": {"graphql-transport-ws"}})
	if err != nil {
		t.Fatal(err)
	}
	send := func(m map[string]any) {
		if err := ws.WriteJSON(m); err != nil {
			t.Fatal(err)
		}
	}
	send(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + token}})
	if m := readWS(t, ws); m.Type != "connection_ack" {
		t.Fatalf("want connection_ack, got %s %s", m.Type, m.Payload)
	}
	send(map[string]any{"id": "1", "type": "subscribe", "payload": map[string]any{
		"query": voucherUpdatedQuery, "variables": map[string]any{"id": id},
	}})
	return ws
}

type wsMessage struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

func readWS(t *testing.T, ws *websocket.Conn) wsMessage {
	t.Helper()
	if err := ws.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var m wsMessage
	if err := ws.ReadJSON(&m); err != nil {
		t.Fatalf("websocket read: %v", err)
	}
	return m
}

// nextPush reads pushes until one matches (earlier ones, e.g. a
// confirmation count seen twice, are skipped); anything but a "next" fails.
func nextPush(t *testing.T, ws *websocket.Conn, match func(push) bool) push {
	t.Helper()
	for {
		m := readWS(t, ws)
		if m.Type == "ping" {
			_ = ws.WriteJSON(map[string]any{"type": "pong"})
			continue
		}
		if m.Type != "next" || m.ID != "1" {
			t.Fatalf("want next, got %s %s", m.Type, m.Payload)
		}
		var body struct {
			Data   struct{ VoucherUpdated push } `json:"data"`
			Errors []json.RawMessage             `json:"errors"`
		}
		if err := json.Unmarshal(m.Payload, &body); err != nil || len(body.Errors) > 0 {
			t.Fatalf("payload %s: %v", m.Payload, err)
		}
		if match(body.Data.VoucherUpdated) {
			return body.Data.VoucherUpdated
		}
	}
}
