"""Image inputs: fetching (image_fetch), model preprocessing (processors), request items (preparer)."""
