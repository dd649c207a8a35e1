package business

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/voucherd/voucherd/ent"
	entbusiness "github.com/voucherd/voucherd/ent/business"
	"github.com/voucherd/voucherd/ent/businessuser"
	"github.com/voucherd/voucherd/ent/user"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/storage"
)

// Bounds of the spec's business fields.
const (
	NameMinRunes = 1
	NameMaxRunes = 128
	// EmailMaxRunes is the sign-in bound on emails: no registered user has a longer one.
	EmailMaxRunes = 128
)

// CreateInput is the create-business body.
type CreateInput struct {
	Name *string `json:"name"`
}

// UpdateInput is the update-business body; an absent name leaves it as it is.
type UpdateInput struct {
	Name *string `json:"name,omitempty"`
}

// StatusInput is the business update-status body.
type StatusInput struct {
	Status *entbusiness.Status `json:"status"`
}

// UserStatusInput is the membership update-status body.
type UserStatusInput struct {
	Status *businessuser.Status `json:"status"`
}

// AddUserInput is the add-user body: a registered email-password user and
// the role they get.
type AddUserInput struct {
	Email *string            `json:"email"`
	Role  *businessuser.Role `json:"role"`
}

// Service owns businesses and their memberships: every rule about who may
// read or change them lives here, for both doors.
type Service struct {
	db  *storage.DB
	now func() time.Time
	// membershipEnded is told of each membership made INACTIVE
	// (OnMembershipEnd).
	membershipEnded func(userID string)
}

// NewService returns the business service. now may be nil (time.Now).
func NewService(db *storage.DB, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	return &Service{db: db, now: now}
}

// OnMembershipEnd sets f to be told, after commit, of the user whose
// membership SetUserStatus made INACTIVE: the app closes that user's
// websockets with it. Call it before serving.
func (s *Service) OnMembershipEnd(f func(userID string)) { s.membershipEnded = f }

// clock is the time written to rows: UTC with millisecond precision, so what
// the API shows is exactly what is stored (PostgreSQL keeps microseconds and
// would round a nanosecond time), and a returned row equals its re-read.
func (s *Service) clock() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

// Create makes a business with the caller as its ACTIVE OWNER.
func (s *Service) Create(ctx context.Context, in CreateInput) (*ent.Business, error) {
	p, err := operation.Caller(ctx, operation.CreateBusiness)
	if err != nil {
		return nil, err
	}
	var v apperr.Validator
	if v.Check(in.Name != nil, "name", "is required") {
		checkName(&v, *in.Name)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	now := s.clock()
	var b *ent.Business
	err = s.db.Tx(ctx, func(tx *ent.Tx) error {
		var err error
		b, err = tx.Business.Create().SetName(*in.Name).SetCreatedAt(now).SetUpdatedAt(now).Save(ctx)
		if err != nil {
			return err
		}
		return tx.BusinessUser.Create().
			SetBusinessID(b.ID).SetUserID(p.ID).
			SetRole(businessuser.RoleOWNER).SetStatus(businessuser.StatusACTIVE).
			SetCreatedAt(now).SetUpdatedAt(now).
			Exec(ctx)
	})
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return b, nil
}

// OldestFirst is the order of businesses and of memberships: oldest
// first, ties by id (ids order only by millisecond). REST lists in it; the
// GraphQL connections' default orderBy is the same.
var (
	OldestFirst        = []entbusiness.OrderOption{entbusiness.ByCreatedAt(), entbusiness.ByID()}
	MembersOldestFirst = []businessuser.OrderOption{businessuser.ByCreatedAt(), businessuser.ByID()}
)

// List is the one list of businesses: those in which the caller is an
// ACTIVE member (INACTIVE businesses are listed: their reads go on). It is
// not ordered or paged: each door does that by its own rule.
func (s *Service) List(ctx context.Context) (*ent.BusinessQuery, error) {
	p, err := operation.Caller(ctx, operation.ListBusinesses)
	if err != nil {
		return nil, err
	}
	return s.ownQuery(p.ID), nil
}

func (s *Service) ownQuery(userID string) *ent.BusinessQuery {
	return s.db.Business.Query().Where(entbusiness.HasMembersWith(
		businessuser.UserID(userID), businessuser.StatusEQ(businessuser.StatusACTIVE)))
}

// Get returns a business the caller is an ACTIVE member of; any other is
// not_found.
func (s *Service) Get(ctx context.Context, id string) (*ent.Business, error) {
	b, _, err := Member(ctx, s.db.Client, operation.GetBusiness, id)
	return b, err
}

// ListUsers is the one list of a business's memberships (ACTIVE and
// INACTIVE), for its ACTIVE members; anyone else is told the business
// does not exist. Every path to a business's members comes through here
// (REST's list and the GraphQL Business.members field), so none can reveal
// them to anyone else. It is not ordered or paged: each door does that.
func (s *Service) ListUsers(ctx context.Context, businessID string) (*ent.BusinessUserQuery, error) {
	p, err := operation.Caller(ctx, operation.ListBusinessUsers)
	if err != nil {
		return nil, err
	}
	if _, _, err := Membership(ctx, s.db.Client, businessID, p.ID); err != nil {
		return nil, err
	}
	// A fresh query rather than a Business's Members edge: rows ent may
	// have eager-loaded for it were ordered by another caller's arguments.
	return s.db.BusinessUser.Query().Where(businessuser.BusinessID(businessID)), nil
}

// GetUser returns one membership, visible to the ACTIVE members of its
// business (node(id:) for bzu_ ids).
func (s *Service) GetUser(ctx context.Context, id string) (*ent.BusinessUser, error) {
	p, err := operation.Caller(ctx, operation.ListBusinessUsers)
	if err != nil {
		return nil, err
	}
	m, err := s.db.BusinessUser.Query().Where(businessuser.ID(id)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, apperr.New(apperr.NotFound, "business user not found")
	}
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	if _, _, err := Membership(ctx, s.db.Client, m.BusinessID, p.ID); err != nil {
		return nil, apperr.New(apperr.NotFound, "business user not found")
	}
	return m, nil
}

// Update changes the business's name (OWNER or ADMIN, ACTIVE business).
func (s *Service) Update(ctx context.Context, businessID string, in UpdateInput) (*ent.Business, error) {
	var out *ent.Business
	err := s.write(ctx, operation.UpdateBusiness, businessID, func(tx *ent.Tx, b *ent.Business, me *ent.BusinessUser) error {
		if err := RequireManager(me); err != nil {
			return err
		}
		var v apperr.Validator
		if in.Name != nil {
			checkName(&v, *in.Name)
		}
		if err := v.Err(); err != nil {
			return err
		}
		if err := RequireActive(b); err != nil {
			return err
		}
		if in.Name == nil || *in.Name == b.Name {
			out = b
			return nil
		}
		var err error
		out, err = tx.Business.UpdateOne(b).SetName(*in.Name).SetUpdatedAt(s.clock()).Save(ctx)
		return err
	})
	return out, err
}

// SetStatus sets the business's status. Only an OWNER may, and it is the one
// write an INACTIVE business accepts: it is how the business comes back.
func (s *Service) SetStatus(ctx context.Context, businessID string, in StatusInput) (*ent.Business, error) {
	var out *ent.Business
	err := s.write(ctx, operation.UpdateBusinessStatus, businessID, func(tx *ent.Tx, b *ent.Business, me *ent.BusinessUser) error {
		if me.Role != businessuser.RoleOWNER {
			return apperr.New(apperr.Forbidden, "only an OWNER may set the business status")
		}
		var v apperr.Validator
		if v.Check(in.Status != nil, "status", "is required") {
			v.Check(entbusiness.StatusValidator(*in.Status) == nil, "status", "must be ACTIVE or INACTIVE")
		}
		if err := v.Err(); err != nil {
			return err
		}
		if *in.Status == b.Status {
			out = b
			return nil
		}
		var err error
		out, err = tx.Business.UpdateOne(b).SetStatus(*in.Status).SetUpdatedAt(s.clock()).Save(ctx)
		return err
	})
	return out, err
}

// SetUserStatus activates or deactivates a membership (OWNER or ADMIN; only
// an OWNER may change an OWNER's membership). The last ACTIVE OWNER cannot be
// deactivated.
func (s *Service) SetUserStatus(ctx context.Context, businessID, businessUserID string, in UserStatusInput) (*ent.BusinessUser, error) {
	var (
		out   *ent.BusinessUser
		ended string // the user whose membership this made INACTIVE
	)
	err := s.write(ctx, operation.UpdateBusinessUserStatus, businessID, func(tx *ent.Tx, b *ent.Business, me *ent.BusinessUser) error {
		ended = ""
		if err := RequireManager(me); err != nil {
			return err
		}
		target, err := tx.BusinessUser.Query().
			Where(businessuser.ID(businessUserID), businessuser.BusinessID(b.ID)).Only(ctx)
		if ent.IsNotFound(err) {
			return apperr.New(apperr.NotFound, "business user not found")
		}
		if err != nil {
			return err
		}
		var v apperr.Validator
		if v.Check(in.Status != nil, "status", "is required") {
			v.Check(businessuser.StatusValidator(*in.Status) == nil, "status", "must be ACTIVE or INACTIVE")
		}
		if err := v.Err(); err != nil {
			return err
		}
		if target.Role == businessuser.RoleOWNER && me.Role != businessuser.RoleOWNER {
			return apperr.New(apperr.Forbidden, "only an OWNER may change an OWNER's membership")
		}
		if err := RequireActive(b); err != nil {
			return err
		}
		if *in.Status == target.Status {
			out = target
			return nil
		}
		if target.Role == businessuser.RoleOWNER && *in.Status == businessuser.StatusINACTIVE {
			// The business row is locked (or, on SQLite, the whole database is
			// in an immediate transaction), so no concurrent change can
			// deactivate another owner between this count and the update.
			owners, err := tx.BusinessUser.Query().Where(
				businessuser.BusinessID(b.ID),
				businessuser.RoleEQ(businessuser.RoleOWNER),
				businessuser.StatusEQ(businessuser.StatusACTIVE),
			).Count(ctx)
			if err != nil {
				return err
			}
			if owners <= 1 {
				return apperr.New(apperr.LastOwner, "the last ACTIVE OWNER of a business cannot be deactivated")
			}
		}
		out, err = tx.BusinessUser.UpdateOne(target).SetStatus(*in.Status).SetUpdatedAt(s.clock()).Save(ctx)
		if err == nil && out.Status == businessuser.StatusINACTIVE {
			ended = out.UserID
		}
		return err
	})
	if err == nil && ended != "" && s.membershipEnded != nil {
		s.membershipEnded(ended)
	}
	return out, err
}

// AddUser makes a registered email-password user a member (OWNER or ADMIN;
// only an OWNER may add an OWNER). A user who already has a membership, even
// an INACTIVE one, is already_exists: update-status reactivates them.
func (s *Service) AddUser(ctx context.Context, businessID string, in AddUserInput) (*ent.BusinessUser, error) {
	var out *ent.BusinessUser
	err := s.write(ctx, operation.AddBusinessUser, businessID, func(tx *ent.Tx, b *ent.Business, me *ent.BusinessUser) error {
		if err := RequireManager(me); err != nil {
			return err
		}
		var v apperr.Validator
		var email string
		if v.Check(in.Email != nil, "email", "is required") {
			email = normalizeEmail(*in.Email)
			n := utf8.RuneCountInString(email)
			v.Check(n >= 1 && n <= EmailMaxRunes, "email", "must be 1 to 128 characters")
		}
		if v.Check(in.Role != nil, "role", "is required") {
			v.Check(businessuser.RoleValidator(*in.Role) == nil, "role", "must be OWNER, ADMIN or MEMBER")
		}
		if err := v.Err(); err != nil {
			return err
		}
		if *in.Role == businessuser.RoleOWNER && me.Role != businessuser.RoleOWNER {
			return apperr.New(apperr.Forbidden, "only an OWNER may add an OWNER")
		}
		if err := RequireActive(b); err != nil {
			return err
		}
		u, err := tx.User.Query().Where(user.Email(email)).Only(ctx)
		if ent.IsNotFound(err) {
			return apperr.New(apperr.NotFound, "no registered user has this email")
		}
		if err != nil {
			return err
		}
		exists, err := tx.BusinessUser.Query().
			Where(businessuser.BusinessID(b.ID), businessuser.UserID(u.ID)).Exist(ctx)
		if err != nil {
			return err
		}
		if exists {
			return errAlreadyMember()
		}
		now := s.clock()
		out, err = tx.BusinessUser.Create().
			SetBusinessID(b.ID).SetUserID(u.ID).SetRole(*in.Role).SetStatus(businessuser.StatusACTIVE).
			SetCreatedAt(now).SetUpdatedAt(now).
			Save(ctx)
		if ent.IsConstraintError(err) {
			return errAlreadyMember()
		}
		return err
	})
	return out, err
}

// write runs fn in a transaction holding the business, after checking that
// the caller is one of its ACTIVE members (not_found otherwise). The
// business row is locked first on PostgreSQL, so writes to one business and
// its memberships are serialized and the caller's membership fn sees cannot
// change under it; SQLite transactions are immediate and serialize anyway.
func (s *Service) write(ctx context.Context, op *operation.Op, businessID string, fn func(tx *ent.Tx, b *ent.Business, me *ent.BusinessUser) error) error {
	p, err := operation.Caller(ctx, op)
	if err != nil {
		return err
	}
	err = s.db.Tx(ctx, func(tx *ent.Tx) error {
		q := tx.Business.Query().Where(entbusiness.ID(businessID))
		if s.db.IsPostgres() {
			q = q.ForUpdate()
		}
		b, err := q.Only(ctx)
		if ent.IsNotFound(err) {
			return errNotFound()
		}
		if err != nil {
			return err
		}
		me, err := tx.BusinessUser.Query().Where(
			businessuser.BusinessID(b.ID), businessuser.UserID(p.ID),
			businessuser.StatusEQ(businessuser.StatusACTIVE),
		).Only(ctx)
		if ent.IsNotFound(err) {
			return errNotFound()
		}
		if err != nil {
			return err
		}
		return fn(tx, b, me)
	})
	if err != nil {
		return apperr.From(err)
	}
	return nil
}

func errNotFound() error { return apperr.New(apperr.NotFound, "business not found") }

func errAlreadyMember() error {
	return apperr.New(apperr.AlreadyExists, "the user is already a member of this business")
}

// checkName applies the spec's 1 to 128 characters (counted in runes, as a
// person counts them). A name must be valid UTF-8, hold something besides
// spaces and have no control characters: it is shown on dashboards.
func checkName(v *apperr.Validator, name string) { v.Text("name", name, NameMaxRunes) }

// normalizeEmail matches identity's sign-up rule: emails are stored trimmed
// and lower-cased.
func normalizeEmail(s string) string { return strings.ToLower(strings.TrimSpace(s)) }
