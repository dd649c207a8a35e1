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
	"github.com/voucherd/voucherd/internal/operation"
)

// MayFollow reports whether the caller in ctx may follow businessID's
// voucher changes (a voucherUpdated subscription by businessId): a user
// who is an ACTIVE member of it, whatever the business's own status (an
// INACTIVE business's reads go on). Anyone else gets not_found. A
// subscription asks again while it lives, so a membership made INACTIVE
// stops it.
func MayFollow(ctx context.Context, c *ent.Client, businessID string) error {
	_, _, err := Member(ctx, c, operation.GetBusiness, businessID)
	return err
}

// Member admits the caller in ctx to op (a business-scoped operation: its
// guard asks for a user token) and returns the business and the caller's
// membership when the caller is an ACTIVE member of it; not_found
// otherwise. Every service acting for a business starts with it (or
// Manager).
//
// A business's API key, once its scope admitted it to op, stands as an
// ADMIN member of its own business: what it may do there at all is the
// operation's scope (operation.Authorize), and the operations no scope
// names (members, API keys, the business's settings) are never open to a
// key. A key of another business gets not_found.
func Member(ctx context.Context, c *ent.Client, op *operation.Op, businessID string) (*ent.Business, *ent.BusinessUser, error) {
	p, err := operation.Caller(ctx, op)
	if err != nil {
		return nil, nil, err
	}
	if p.IsAPIKey() {
		return keyStanding(ctx, c, p, businessID)
	}
	return Membership(ctx, c, businessID, p.ID)
}

// keyStanding is an API key's standing in businessID: an ADMIN of its own
// business, a stranger to any other.
func keyStanding(ctx context.Context, c *ent.Client, p *auth.Principal, businessID string) (*ent.Business, *ent.BusinessUser, error) {
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

// Manager is Member plus the OWNER or ADMIN role (forbidden without it).
func Manager(ctx context.Context, c *ent.Client, op *operation.Op, businessID string) (*ent.Business, error) {
	b, m, err := Member(ctx, c, op, businessID)
	if err != nil {
		return nil, err
	}
	if err := RequireManager(m); err != nil {
		return nil, err
	}
	return b, nil
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
