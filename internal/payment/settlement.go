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
// the rest, never shown (the REST view, view.SettlementOf, leaves them
// empty, and they are omitted when empty; the GraphQL type names only the
// public fields). A field added there must be omitempty too.
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

	// Detected says the watcher found the transaction paying the
	// checkout's deposit address, or naming its Solana Pay reference (no
	// receipt named it).
	Detected bool `json:"detected,omitempty"`
	// Late says the transaction was mined after the voucher's expiresAt.
	Late bool `json:"late,omitempty"`

	// BlockHash is the hash of the block the transaction was seen in, so a
	// reorg shows as another hash at BlockNumber.
	BlockHash string `json:"blockHash,omitempty"`
}

// Late reports whether a transaction that pays (mined or confirmed, not
// INVALID) was mined after the voucher expired: its events say data.late.
func (s *Settlement) Late() bool {
	if s == nil {
		return false
	}
	for _, t := range s.Transactions {
		if t.Late && (t.Status == TxMined || t.Status == TxConfirmed) {
			return true
		}
	}
	return false
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

// Sweep statuses (deposit.sweep.status).
const (
	SweepNone    = "NONE"
	SweepPending = "PENDING"
	SweepDone    = "DONE"
	SweepFailed  = "FAILED"
)

// Deposit is a checkout's deposit address on a network whose finance entry
// names a depositFactory: the CREATE2 address of a forwarder under that
// factory whose only destination is PayoutAddress (the widget's wallet for
// the network). It is the checkout's expectedPayment.wallet.address, so the
// settlement rules' "payee's wallet" is the deposit address; the watcher
// finds payments to it with no receipt, and a sweep moves what arrived to
// the payout wallet (docs/settlement.md, "Deposit addresses").
type Deposit struct {
	Address       string `json:"address"`
	PayoutAddress string `json:"payoutAddress"`
	// Factory is the deposit factory the address is computed under
	// (bookkeeping: a finance file that names another factory later does
	// not change where this checkout's funds are).
	Factory string `json:"factory,omitempty"`
	Sweep   Sweep  `json:"sweep"`
}

// Sweep is what the service did to move a deposit address's funds to its
// payout wallet: NONE until it has something to move (or when sweeping is
// off), PENDING while a flush is due or in flight, DONE once a flush moved
// Amount in TransactionHash, FAILED when the last try failed (it is tried
// again; the funds stay at the deposit address, where anyone's flush
// still sends them only to the payout wallet).
type Sweep struct {
	Status          string `json:"status"`
	TransactionHash string `json:"transactionHash,omitempty"`
	// Amount is what the last flush moved, in the due currency (decimal).
	Amount string `json:"amount,omitempty"`

	// Attempts counts consecutive failed tries (bookkeeping).
	Attempts int `json:"attempts,omitempty"`
	// Swept is the paid amount (settlement.paidAmount) the last DONE
	// sweep covered: a later payment makes paidAmount larger, so another
	// sweep is due (bookkeeping).
	Swept string `json:"swept,omitempty"`
	// InFlight is the flush transaction sent and not yet seen mined, and
	// Target the paid amount it covers (bookkeeping).
	InFlight string `json:"inFlight,omitempty"`
	Target   string `json:"target,omitempty"`
}
