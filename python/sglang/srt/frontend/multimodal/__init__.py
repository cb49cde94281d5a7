"""Image inputs: image strings checked (image_source), URLs fetched safely (url_guard, http_fetch),
images decoded within budgets (image_decode, image_budget, image_loader), model preprocessing
(processors) and GME request items (preparer)."""
