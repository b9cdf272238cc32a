//! The passes, one per file (placeholder: owned by the backend work).
