package voucher

import (
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"time"

	"github.com/voucherd/voucherd/ent"
	entvoucher "github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/session"
	"github.com/voucherd/voucherd/internal/storage"
)

// CodeLength is the spec's voucher code length (digits).
const CodeLength = 6

// codeDraws bounds how often reserve draws another code when the drawn one
// is live elsewhere. With a million codes a collision is rare until very
// many vouchers are live at once; eight misses in a row means the space is
// nearly full, which deserves an error rather than a spin.
const codeDraws = 8

// Reserve creates a RESERVED voucher on the payer's context named by
// in.Code. The caller (a resource token on its own context, or a
// registered user) becomes the payee; the context's owner is the payer.
// With BusinessID the caller, an ACTIVE member of that ACTIVE business,
// reserves on its behalf.
func (s *Service) Reserve(ctx context.Context, in ReserveInput) (*ent.Voucher, error) {
	p, err := operation.Caller(ctx, operation.ReserveVoucher)
	if err != nil {
		return nil, err
	}
	var v apperr.Validator
	v.Check(in.Code != "", "code", "is required")
	v.Check(in.BusinessID == nil || *in.BusinessID != "", "businessId", "must not be empty")
	if err := v.Err(); err != nil {
		return nil, err
	}
	code, ok := session.NormalizeCode(in.Code)
	if !ok {
		return nil, apperr.New(apperr.InvalidCode, "context code must be 6 characters of "+session.CodeAlphabet)
	}
	if p.Kind == auth.KindResource {
		// A resource token knows one context; any other code is, to it,
		// a context that does not exist.
		own, err := s.db.VoucherSession.Get(ctx, p.ID)
		if err != nil && !ent.IsNotFound(err) {
			return nil, apperr.InternalError(err)
		}
		if own == nil || own.Code != code {
			return nil, apperr.New(apperr.NotFound, "context not found")
		}
	}
	sess, err := s.sessions.Live(ctx, code)
	if err != nil {
		return nil, err
	}
	var businessID *string
	if in.BusinessID != nil {
		if p.Kind != auth.KindUser {
			return nil, apperr.New(apperr.NotFound, "business not found")
		}
		b, _, err := business.Membership(ctx, s.db.Client, *in.BusinessID, p.ID)
		if err != nil {
			return nil, err
		}
		if err := business.RequireActive(b); err != nil {
			return nil, err
		}
		businessID = &b.ID
	}

	now := s.clock()
	return s.createWithCode(ctx, now, func(tx *ent.Tx, vcode string) (*ent.Voucher, error) {
		created, err := tx.Voucher.Create().
			SetCode(vcode).SetLiveCode(vcode).
			SetSessionID(sess.ID).SetPayerID(sess.OwnerID).SetPayeeID(p.ID).
			SetNillableBusinessID(businessID).
			SetExpiresAt(now.Add(s.ttl)).SetCreatedAt(now).SetUpdatedAt(now).
			Save(ctx)
		if err != nil {
			return nil, err
		}
		if created.BusinessID != nil {
			return created, s.events.VoucherChanged(ctx, tx, nil, created)
		}
		return created, nil
	})
}

// createWithCode draws a voucher code and runs create with it in a
// transaction, drawing again (codeDraws at most) while the code is live on
// another voucher (create's insert then violates the live-code index). A
// voucher that expired but was not swept yet still holds its code; the
// code is free again, so it is released first (only the internal
// live_code changes: the sweeper records the expiry). The created voucher
// is published after commit.
func (s *Service) createWithCode(ctx context.Context, now time.Time, create func(tx *ent.Tx, code string) (*ent.Voucher, error)) (*ent.Voucher, error) {
	for attempt := 0; attempt < codeDraws; attempt++ {
		vcode, err := s.newCode()
		if err != nil {
			return nil, apperr.InternalError(err)
		}
		var created *ent.Voucher
		err = s.db.Tx(ctx, func(tx *ent.Tx) error {
			if _, err := tx.ExecContext(ctx, s.db.Rebind("UPDATE vouchers SET live_code = NULL WHERE live_code = ? AND expires_at <= ?"), vcode, now); err != nil {
				return err
			}
			var err error
			created, err = create(tx, vcode)
			return err
		})
		if ent.IsConstraintError(err) {
			continue // the code is live on another voucher: draw again
		}
		if err != nil {
			return nil, apperr.From(err)
		}
		stampCommit(ctx)
		s.published(created)
		return created, nil
	}
	return nil, apperr.InternalError(fmt.Errorf("voucher: no free voucher code after %d draws", codeDraws))
}

// NewCode draws a 6-digit voucher code from crypto/rand.
func NewCode() (string, error) {
	n, err := rand.Int(rand.Reader, big.NewInt(1_000_000))
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%06d", n.Int64()), nil
}

// SweepExpired records every RESERVED or REDEEMED voucher past its expiry
// as DISCARDED (reason expired), frees its code, notifies its watchers, and
// hands business vouchers to the event sink, all in one transaction. Reads
// already showed these vouchers as discarded; this makes it durable and
// emits the events. It returns how many vouchers it recorded.
func (s *Service) SweepExpired(ctx context.Context) (int, error) {
	now := s.clock()
	dialect := s.db.Dialect
	live := quoteStatus(entvoucher.StatusRESERVED, entvoucher.StatusREDEEMED)
	var swept []*ent.Voucher
	err := s.db.Tx(ctx, func(tx *ent.Tx) error {
		// The event sink wants each business voucher as it was; the
		// UPDATE only returns the new rows. Locking them first also keeps
		// them as read until the UPDATE below.
		sel := "SELECT " + columnList + " FROM vouchers WHERE " + live + " AND expires_at <= ? AND business_id IS NOT NULL"
		if dialect == storage.Postgres {
			sel += " FOR UPDATE"
		}
		prevs, err := queryVouchers(ctx, tx, dialect, rebind(dialect, sel), now)
		if err != nil {
			return err
		}
		st := statement{
			sets: []assignment{
				{col: "status", lit: "'" + string(entvoucher.StatusDISCARDED) + "'"},
				{col: "discard_reason", lit: "'" + ReasonExpired + "'"},
				{col: "live_code", lit: "NULL"},
				{col: "updated_at", val: now},
			},
			where: []string{live, "expires_at <= ?"},
			args:  []any{now},
		}
		q, args := st.build(dialect)
		if swept, err = queryVouchers(ctx, tx, dialect, q, args...); err != nil {
			return err
		}
		byID := make(map[string]*ent.Voucher, len(prevs))
		for _, p := range prevs {
			byID[p.ID] = p
		}
		for _, next := range swept {
			if next.BusinessID == nil {
				continue
			}
			prev := byID[next.ID]
			if prev == nil {
				return fmt.Errorf("voucher: swept business voucher %s was not locked first", next.ID)
			}
			if err := s.events.VoucherChanged(ctx, tx, prev, next); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("voucher: sweep: %w", err)
	}
	s.published(swept...)
	if len(swept) > 0 {
		s.log.InfoContext(ctx, "vouchers expired", "count", len(swept))
	}
	return len(swept), nil
}
