"""What a test did and what it earns: declarations, records, statuses, points, references."""
