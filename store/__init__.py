"""A content-addressed store shared safely by concurrent processes."""
