"""The marketplace: items, visibility, stars, and resolving marketplace:// and http(s)
references."""
