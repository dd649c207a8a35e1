package rest

import (
	"net/http"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/apitime"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/httpx"
)

// businessView is a business as create-business and the list return it.
type businessView struct {
	ID        string       `json:"id"`
	Name      string       `json:"name"`
	Status    string       `json:"status"`
	CreatedAt apitime.Time `json:"createdAt"`
}

// businessDetail is a business as get returns it (with updatedAt).
type businessDetail struct {
	businessView
	UpdatedAt apitime.Time `json:"updatedAt"`
}

// businessUserView is a membership as the users list returns it.
type businessUserView struct {
	ID        string       `json:"id"`
	UserID    string       `json:"userId"`
	Role      string       `json:"role"`
	Status    string       `json:"status"`
	CreatedAt apitime.Time `json:"createdAt"`
}

func viewBusiness(b *ent.Business) businessView {
	return businessView{ID: b.ID, Name: b.Name, Status: string(b.Status), CreatedAt: apitime.From(b.CreatedAt)}
}

func viewBusinessUser(m *ent.BusinessUser) businessUserView {
	return businessUserView{ID: m.ID, UserID: m.UserID, Role: string(m.Role), Status: string(m.Status), CreatedAt: apitime.From(m.CreatedAt)}
}

func (s *server) createBusiness(w http.ResponseWriter, r *http.Request) error {
	var in business.CreateInput
	if err := decode(r, &in); err != nil {
		return err
	}
	b, err := s.Businesses.Create(r.Context(), in)
	if err != nil {
		return err
	}
	return ok(w, viewBusiness(b))
}

func (s *server) listBusinesses(w http.ResponseWriter, r *http.Request) error {
	rows, err := s.Businesses.ListOwn(r.Context())
	if err != nil {
		return err
	}
	out := make([]businessView, len(rows))
	for i, b := range rows {
		out[i] = viewBusiness(b)
	}
	return ok(w, out)
}

func (s *server) getBusiness(w http.ResponseWriter, r *http.Request) error {
	b, err := s.Businesses.Get(r.Context(), r.PathValue("businessId"))
	if err != nil {
		return err
	}
	return ok(w, businessDetail{businessView: viewBusiness(b), UpdatedAt: apitime.From(b.UpdatedAt)})
}

func (s *server) updateBusiness(w http.ResponseWriter, r *http.Request) error {
	var in business.UpdateInput
	if err := decode(r, &in); err != nil {
		return err
	}
	if _, err := s.Businesses.Update(r.Context(), r.PathValue("businessId"), in); err != nil {
		return err
	}
	httpx.WriteEmpty(w, http.StatusOK)
	return nil
}

func (s *server) updateBusinessStatus(w http.ResponseWriter, r *http.Request) error {
	var in business.StatusInput
	if err := decode(r, &in); err != nil {
		return err
	}
	if _, err := s.Businesses.SetStatus(r.Context(), r.PathValue("businessId"), in); err != nil {
		return err
	}
	httpx.WriteEmpty(w, http.StatusOK)
	return nil
}

func (s *server) listBusinessUsers(w http.ResponseWriter, r *http.Request) error {
	rows, err := s.Businesses.ListUsers(r.Context(), r.PathValue("businessId"))
	if err != nil {
		return err
	}
	out := make([]businessUserView, len(rows))
	for i, m := range rows {
		out[i] = viewBusinessUser(m)
	}
	return ok(w, out)
}

func (s *server) addBusinessUser(w http.ResponseWriter, r *http.Request) error {
	var in business.AddUserInput
	if err := decode(r, &in); err != nil {
		return err
	}
	m, err := s.Businesses.AddUser(r.Context(), r.PathValue("businessId"), in)
	if err != nil {
		return err
	}
	return ok(w, viewBusinessUser(m))
}

func (s *server) updateBusinessUserStatus(w http.ResponseWriter, r *http.Request) error {
	var in business.UserStatusInput
	if err := decode(r, &in); err != nil {
		return err
	}
	if _, err := s.Businesses.SetUserStatus(r.Context(), r.PathValue("businessId"), r.PathValue("businessUserId"), in); err != nil {
		return err
	}
	httpx.WriteEmpty(w, http.StatusOK)
	return nil
}
