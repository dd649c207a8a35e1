package rest

import (
	"net/http"

	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/httpx"
	"github.com/voucherd/voucherd/internal/paging"
	"github.com/voucherd/voucherd/internal/view"
)

func (s *server) createBusiness(w http.ResponseWriter, r *http.Request) error {
	var in business.CreateInput
	if err := decode(r, &in); err != nil {
		return err
	}
	b, err := s.Businesses.Create(r.Context(), in)
	if err != nil {
		return err
	}
	return ok(w, view.OfBusiness(b))
}

func (s *server) listBusinesses(w http.ResponseWriter, r *http.Request) error {
	list, err := s.Businesses.List(r.Context())
	if err != nil {
		return err
	}
	rows, err := paging.All(r.Context(), list.Order(business.OldestFirst...))
	if err != nil {
		return err
	}
	out := make([]view.Business, len(rows))
	for i, b := range rows {
		out[i] = view.OfBusiness(b)
	}
	return ok(w, out)
}

func (s *server) getBusiness(w http.ResponseWriter, r *http.Request) error {
	b, err := s.Businesses.Get(r.Context(), r.PathValue("businessId"))
	if err != nil {
		return err
	}
	return ok(w, view.OfBusinessDetail(b))
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
	list, err := s.Businesses.ListUsers(r.Context(), r.PathValue("businessId"))
	if err != nil {
		return err
	}
	rows, err := paging.All(r.Context(), list.Order(business.MembersOldestFirst...))
	if err != nil {
		return err
	}
	out := make([]view.BusinessUser, len(rows))
	for i, m := range rows {
		out[i] = view.OfBusinessUser(m)
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
	return ok(w, view.OfBusinessUser(m))
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
