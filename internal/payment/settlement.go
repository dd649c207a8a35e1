package payment

import "time"

// Settlement statuses (settlement.status).
const (
	SettlementPending   = "PENDING"
	SettlementConfirmed = "CONFIRMED"
	SettlementUnderpaid = "UNDERPAID"
	SettlementOverpaid  = "OVERPAID"
	SettlementFailed    = "FAILED"
)

// Settlement transaction statuses (settlement.transactions[].status).
const (
	TxPending   = "PENDING"
	TxMined     = "MINED"
	TxConfirmed = "CONFIRMED"
	TxInvalid   = "INVALID"
)

// Settlement is what the chain showed about a resolved voucher's payment
// (docs/settlement.md). It is stored
// in the voucher row, so a settlement change is one conditional UPDATE of
// that row, and it travels with the voucher to both doors and to
// subscribers. internal/settlement owns every rule that moves it.
//
// The fields after Transactions are the watcher's bookkeeping: stored with
// the rest, never shown (the REST view and the GraphQL type name only the
// public fields).
type Settlement struct {
	Status                string                  `json:"status"`
	Verified              bool                    `json:"verified"`
	RequiredConfirmations int                     `json:"requiredConfirmations"`
	Confirmations         int                     `json:"confirmations"`
	PaidAmount            string                  `json:"paidAmount,omitempty"`
	Currency              string                  `json:"currency,omitempty"`
	Transactions          []SettlementTransaction `json:"transactions"`

	// Network is the network the transactions are looked up on.
	Network string `json:"network,omitempty"`
	// Deadline ends the settlement window: a settlement still PENDING then
	// is decided with what confirmed (FAILED when nothing did).
	Deadline *time.Time `json:"deadline,omitempty"`
	// Events are the deposit events already recorded for this settlement,
	// so each is written at most once per voucher.
	Events []string `json:"events,omitempty"`
}

// SettlementTransaction is one receipt's transaction as the chain shows it.
type SettlementTransaction struct {
	TransactionHash string `json:"transactionHash"`
	Status          string `json:"status"`
	// Reason says why an INVALID transaction does not pay.
	Reason        string `json:"reason,omitempty"`
	BlockNumber   *int64 `json:"blockNumber,omitempty"`
	Confirmations int    `json:"confirmations"`
	// Amount is what the transaction paid of the due currency (decimal);
	// empty before it is mined, when it pays nothing, and for CUSTOM.
	Amount string `json:"amount,omitempty"`

	// BlockHash is the hash of the block the transaction was seen in, so a
	// reorg shows as another hash at BlockNumber.
	BlockHash string `json:"blockHash,omitempty"`
}

// Final reports whether s is decided (no longer PENDING).
func (s *Settlement) Final() bool { return s != nil && s.Status != SettlementPending }

// SentEvent reports whether event t was already recorded.
func (s *Settlement) SentEvent(t string) bool {
	for _, e := range s.Events {
		if e == t {
			return true
		}
	}
	return false
}
