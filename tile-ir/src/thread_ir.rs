//! (placeholder: owned by the backend work)
