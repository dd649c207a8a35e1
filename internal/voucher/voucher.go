// Package voucher owns the voucher lifecycle: reserve on a payer's context,
// redeem (SIMPLE or CUSTOM), negotiate an FX alternative, resolve with
// receipts, discard, expire, and the interop-init signature submissions. It
// decides who may see and change a voucher, validates every body against the
// token registry, and makes every transition one conditional statement so
// concurrent callers can never both win. Both doors (REST and GraphQL) call
// it; docs/vouchers.md describes the rules it implements.
package voucher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/businessuser"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/revocation"
	"github.com/voucherd/voucherd/internal/session"
	"github.com/voucherd/voucherd/internal/storage"
)

// DefaultTTL is a voucher's lifetime from reservation unless configured.
const DefaultTTL = 15 * time.Minute

// Discard reasons, as shown in discardReason.
const (
	ReasonExpired   = "expired"
	ReasonDiscarded = "discarded"
)

// Options are the service's collaborators. Finance and Sessions are
// required; everything else has a default.
type Options struct {
	Finance  *finance.Service
	Sessions *session.Service
	// TTL is the voucher lifetime (DefaultTTL when zero).
	TTL time.Duration
	// Now is the clock (time.Now when nil); tests move it.
	Now func() time.Time
	// Events receives every change of a business voucher inside its
	// transaction (NoEvents when nil).
	Events EventSink
	// Publisher gets every committed change with its new state, after
	// commit (a no-op when nil): this replica's hub, and on PostgreSQL the
	// pubsub.Notifier that tells every other replica.
	Publisher pubsub.Publisher
	// NewCode draws voucher codes (NewCode when nil); tests fix the draws.
	NewCode func() (string, error)
	// Settlement opens a resolved voucher's settlement (none when nil).
	Settlement Settler
	// Ends, when set, lets reads remember ACTIVE memberships (Visible);
	// every membership made INACTIVE must then be ended through it
	// (business.Service.OnMembershipEnd), as the app does. Nil: every
	// read asks the database.
	Ends *revocation.Ends
	Log  *slog.Logger
}

// Service is the voucher service. It is safe for concurrent use.
type Service struct {
	db       *storage.DB
	fin      *finance.Service
	reg      *finance.Registry
	sessions *session.Service
	ttl      time.Duration
	now      func() time.Time
	events   EventSink
	pub      pubsub.Publisher
	newCode  func() (string, error)
	settler  Settler
	log      *slog.Logger
	// members remembers ACTIVE memberships for Visible (nil: none).
	members *revocation.Cache[memberKey, struct{}]
	// terms keeps redeemed vouchers' fixed terms, so negotiate runs as one
	// statement (see termsCache).
	terms *termsCache
}

// NewService returns the voucher service over db. It installs the vouchers'
// read model on db's client (so build one per client).
func NewService(db *storage.DB, o Options) (*Service, error) {
	if o.Finance == nil || o.Sessions == nil {
		return nil, errors.New("voucher: Finance and Sessions are required")
	}
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Events == nil {
		o.Events = NoEvents{}
	}
	if o.Publisher == nil {
		o.Publisher = pubsub.PublisherFunc(func(pubsub.VoucherChange) {})
	}
	if o.NewCode == nil {
		o.NewCode = NewCode
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	now := o.Now
	o.Now = func() time.Time { return now().UTC().Truncate(time.Microsecond) }
	db.Voucher.Intercept(readModel(o.Now))
	var members *revocation.Cache[memberKey, struct{}]
	if o.Ends != nil {
		members = revocation.NewCacheFor[memberKey, struct{}](o.Ends, 0)
	}
	return &Service{
		db: db, fin: o.Finance, reg: o.Finance.Registry(), sessions: o.Sessions, members: members, terms: newTermsCache(termsGeneration),
		ttl: o.TTL, now: o.Now, events: o.Events, pub: o.Publisher, newCode: o.NewCode, settler: o.Settlement, log: o.Log,
	}, nil
}

// clock is the service's now: UTC, truncated to PostgreSQL's microsecond
// precision, so a time compared in Go and the same time stored in the
// database agree (PostgreSQL would round a finer one).
func (s *Service) clock() time.Time { return s.now() }

// readModel shows a RESERVED or REDEEMED voucher past its expiry as
// DISCARDED (reason expired) on every ent read, on both doors, before the
// sweeper has recorded it. The stored row is untouched until then.
func readModel(now func() time.Time) ent.Interceptor {
	return ent.InterceptFunc(func(next ent.Querier) ent.Querier {
		return ent.QuerierFunc(func(ctx context.Context, q ent.Query) (ent.Value, error) {
			v, err := next.Query(ctx, q)
			switch rows := v.(type) {
			case []*ent.Voucher:
				t := now()
				for _, r := range rows {
					applyExpiry(r, t)
				}
			case *ent.Voucher:
				applyExpiry(rows, now())
			}
			return v, err
		})
	})
}

// ReadModel is what every read does to a voucher (see readModel), for
// vouchers that reach a replica without a read: the rows change
// notifications carry.
func ReadModel(now func() time.Time) func(*ent.Voucher) {
	return func(v *ent.Voucher) { applyExpiry(v, now().UTC().Truncate(time.Microsecond)) }
}

// applyExpiry turns v into what callers see once it has expired, and
// compacts its opaque JSON (PostgreSQL's jsonb hands it back spaced out).
func applyExpiry(v *ent.Voucher, now time.Time) {
	if v == nil {
		return
	}
	compactOpaque(v)
	showExpired(v, now)
}

// showExpired is the expiry half of applyExpiry, for rows scanned by
// scanVoucher (which compacts already).
func showExpired(v *ent.Voucher, now time.Time) {
	if isExpired(v, now) {
		v.Status = entvoucher.StatusDISCARDED
		reason := ReasonExpired
		v.DiscardReason = &reason
		v.LiveCode = nil
	}
}

// compactOpaque renders extras and payeeInfo compactly, whichever database
// stored them. jsonb also orders an object's keys its own way: the API
// promises the same object, not the same key order.
func compactOpaque(v *ent.Voucher) {
	for i, e := range v.Extras {
		v.Extras[i] = compact(e)
	}
	if len(v.PayeeInfo) > 0 {
		v.PayeeInfo = compact(v.PayeeInfo)
	}
}

func compact(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}

// isExpired reports whether v is live in storage but past its expiry.
func isExpired(v *ent.Voucher, now time.Time) bool {
	return (v.Status == entvoucher.StatusRESERVED || v.Status == entvoucher.StatusREDEEMED) && !now.Before(v.ExpiresAt)
}

// role is what a caller is to one voucher.
type role uint8

const (
	rolePayee role = 1 << iota
	rolePayer
	roleMember
)

// rolesOf returns the roles p holds on v without asking the database
// (business membership is checked separately, only when it matters).
func rolesOf(p *auth.Principal, v *ent.Voucher) role {
	var r role
	if p == nil {
		return 0
	}
	if v.PayeeID == p.ID {
		r |= rolePayee
	}
	if v.PayerID == p.ID {
		r |= rolePayer
	}
	return r
}

var errNotFound = apperr.New(apperr.NotFound, "voucher not found")

// rolesIn is rolesOf bound by the caller's membership in the voucher's
// business (docs/hardening.md): a user whose membership in it is
// not ACTIVE holds no role on its vouchers, not even the payee role on
// those it reserved, and the payee role on a business voucher needs an
// ACTIVE membership. c is the client (or transaction's client) to ask.
// Vouchers without a business, and callers other than users, need no
// query.
func rolesIn(ctx context.Context, c *ent.Client, p *auth.Principal, v *ent.Voucher) (role, error) {
	r := rolesOf(p, v)
	if r == 0 || v.BusinessID == nil || p.Kind != auth.KindUser {
		return r, nil
	}
	statuses, err := c.BusinessUser.Query().
		Where(businessuser.BusinessID(*v.BusinessID), businessuser.UserID(p.ID)).
		Select(businessuser.FieldStatus).Strings(ctx)
	if err != nil {
		return 0, apperr.InternalError(err)
	}
	switch {
	case len(statuses) == 0:
		r &^= rolePayee // never a member: it cannot have reserved it as one
	case statuses[0] != string(businessuser.StatusACTIVE):
		r = 0
	}
	return r, nil
}

// Visible reports whether p may see v (get it, find it in a query, watch
// it): its payee, its payer, or an ACTIVE member of its business, with the
// payee and payer roles bound by membership (as rolesIn binds them: a
// member made INACTIVE sees none of the business's vouchers; the payee
// role on a business voucher needs a membership). A user's ACTIVE
// membership, once read, is remembered when the service has Options.Ends
// (internal/revocation: a membership made INACTIVE ends the user on every
// replica before it is answered), so a member's reads cost no statement
// for it.
func (s *Service) Visible(ctx context.Context, p *auth.Principal, v *ent.Voucher) (bool, error) {
	if p == nil || v == nil {
		return false, nil
	}
	if p.IsAPIKey() {
		// A business's key sees its business's vouchers (it is neither
		// payee nor payer of any).
		return v.BusinessID != nil && *v.BusinessID == p.BusinessID, nil
	}
	if v.BusinessID == nil || p.Kind != auth.KindUser {
		return rolesOf(p, v) != 0, nil
	}
	key := memberKey{business: *v.BusinessID, user: p.ID}
	if _, ok := s.members.Get(key, time.Time{}); ok {
		return true, nil
	}
	t := s.members.Begin()
	statuses, err := s.db.BusinessUser.Query().
		Where(businessuser.BusinessID(key.business), businessuser.UserID(key.user)).
		Select(businessuser.FieldStatus).Strings(ctx)
	if err != nil {
		return false, apperr.InternalError(err)
	}
	r := rolesOf(p, v)
	switch {
	case len(statuses) == 0:
		r &^= rolePayee // never a member: it cannot have reserved it as one
	case statuses[0] == string(businessuser.StatusACTIVE):
		s.members.Put(t, key, key.user, struct{}{}, time.Time{})
		return true, nil
	default:
		r = 0
	}
	return r != 0, nil
}

// memberKey is a user's membership in a business (Service.members).
type memberKey struct{ business, user string }

// Get returns voucher id as the caller may see it; a voucher the caller may
// not see is not_found, exactly like one that does not exist.
func (s *Service) Get(ctx context.Context, id string) (*ent.Voucher, error) {
	p, err := operation.Caller(ctx, operation.GetVoucher)
	if err != nil {
		return nil, err
	}
	// The hot read: one precomputed primary-key SELECT scanned directly,
	// rather than ent's query builder (which rebuilt the same SQL text and
	// scanned through reflection on every call). The read model applies as
	// on every ent read.
	v, err := s.load(ctx, s.db.Prepared, id, false)
	if err != nil {
		return nil, err
	}
	showExpired(v, s.clock())
	ok, err := s.Visible(ctx, p, v)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errNotFound
	}
	return v, nil
}

// published hands committed changes with their new state to the
// publisher: this replica's hub in process (no read, no round trip through
// the database), and on PostgreSQL the notifier, whose notification
// reaches every replica, this one included (its hub drops that echo of a
// version it already dispatched).
func (s *Service) published(vs ...*ent.Voucher) {
	for _, v := range vs {
		s.pub.Publish(pubsub.ChangeOf(v).WithState(v))
	}
}
