// Package business manages businesses and their members, and answers the
// membership questions other services ask (may this user act for, or see
// the vouchers of, this business?).
package business

import (
	"context"

	"github.com/voucherd/voucherd/ent"
	entbusiness "github.com/voucherd/voucherd/ent/business"
	"github.com/voucherd/voucherd/ent/businessuser"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
)

// MayFollow reports whether the caller in ctx may follow businessID's
// voucher changes (a voucherUpdated subscription by businessId): a user
// who is an ACTIVE member of it, whatever the business's own status (an
// INACTIVE business's reads go on). Anyone else gets not_found. A
// subscription asks again while it lives, so a membership made INACTIVE
// stops it.
func MayFollow(ctx context.Context, c *ent.Client, businessID string) error {
	p, err := auth.RequireUser(ctx)
	if err != nil {
		return err
	}
	_, _, err = Membership(ctx, c, businessID, p.ID)
	return err
}

// Caller returns the business and the caller's standing in it when the
// caller in ctx may act for businessID: a user token's ACTIVE membership,
// or an API key of that very business. A key stands as an ADMIN member:
// which of the business's operations it reaches at all is decided before
// any service runs, by the operation's scope (internal/operation), and the
// operations no scope names (members, API keys, the business's own
// settings) are never open to a key. Anyone else, and a key of another
// business, gets not_found.
func Caller(ctx context.Context, c *ent.Client, businessID string) (*ent.Business, *ent.BusinessUser, error) {
	p := auth.FromContext(ctx)
	if p.IsAPIKey() {
		if p.BusinessID != businessID {
			return nil, nil, apperr.New(apperr.NotFound, "business not found")
		}
		b, err := c.Business.Get(ctx, businessID)
		if ent.IsNotFound(err) {
			return nil, nil, apperr.New(apperr.NotFound, "business not found")
		}
		if err != nil {
			return nil, nil, apperr.InternalError(err)
		}
		return b, &ent.BusinessUser{BusinessID: b.ID, Role: businessuser.RoleADMIN, Status: businessuser.StatusACTIVE}, nil
	}
	p, err := auth.RequireUser(ctx)
	if err != nil {
		return nil, nil, err
	}
	return Membership(ctx, c, businessID, p.ID)
}

// Membership returns the business and the caller's membership in it when
// userID is an ACTIVE member; otherwise not_found (non-members learn nothing
// about the business's existence).
func Membership(ctx context.Context, c *ent.Client, businessID, userID string) (*ent.Business, *ent.BusinessUser, error) {
	m, err := c.BusinessUser.Query().
		Where(businessuser.BusinessID(businessID), businessuser.UserID(userID), businessuser.StatusEQ(businessuser.StatusACTIVE)).
		WithBusiness().
		Only(ctx)
	if ent.IsNotFound(err) {
		return nil, nil, apperr.New(apperr.NotFound, "business not found")
	}
	if err != nil {
		return nil, nil, apperr.InternalError(err)
	}
	return m.Edges.Business, m, nil
}

// RequireActive returns business_inactive for an INACTIVE business: its
// writes, new vouchers and deliveries stop while its reads go on.
func RequireActive(b *ent.Business) error {
	if b.Status != entbusiness.StatusACTIVE {
		return apperr.New(apperr.BusinessInactive, "the business is inactive")
	}
	return nil
}

// ActiveMemberBusinessIDs lists the businesses in which userID is an ACTIVE
// member (for listing the vouchers a dashboard user may see).
func ActiveMemberBusinessIDs(ctx context.Context, c *ent.Client, userID string) ([]string, error) {
	ids, err := c.BusinessUser.Query().
		Where(businessuser.UserID(userID), businessuser.StatusEQ(businessuser.StatusACTIVE)).
		Select(businessuser.FieldBusinessID).Strings(ctx)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return ids, nil
}

// MemberBusinessIDs lists the businesses in which userID is a member,
// split by the membership's status.
func MemberBusinessIDs(ctx context.Context, c *ent.Client, userID string) (active, inactive []string, err error) {
	rows, err := c.BusinessUser.Query().Where(businessuser.UserID(userID)).
		Select(businessuser.FieldBusinessID, businessuser.FieldStatus).All(ctx)
	if err != nil {
		return nil, nil, apperr.InternalError(err)
	}
	for _, m := range rows {
		if m.Status == businessuser.StatusACTIVE {
			active = append(active, m.BusinessID)
		} else {
			inactive = append(inactive, m.BusinessID)
		}
	}
	return active, inactive, nil
}

// CanManage reports whether a membership may change the business: update
// it, manage members and webhooks, retry deliveries (OWNER or ADMIN).
func CanManage(m *ent.BusinessUser) bool {
	return m != nil && (m.Role == businessuser.RoleOWNER || m.Role == businessuser.RoleADMIN)
}

// RequireManager is CanManage as an error: members without the role get
// forbidden (they may know the business exists; they can read it).
func RequireManager(m *ent.BusinessUser) error {
	if !CanManage(m) {
		return apperr.New(apperr.Forbidden, "this needs the OWNER or ADMIN role in the business")
	}
	return nil
}
