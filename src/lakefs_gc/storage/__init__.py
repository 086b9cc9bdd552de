"""Object stores: locations, and (lazily imported) filesystem backends."""
