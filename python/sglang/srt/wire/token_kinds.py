"""What per-token rows an input asks for (`token_output` on the request messages; None: pooled).

The HTTP process chooses the kind and the scheduler's output head (layers/token_outputs.py) makes
the rows, so the names live here, where both may import them without the HTTP process importing
torch.
"""

from __future__ import annotations

TOKENS_HIDDEN = "hidden"  # every token's last hidden state, as is
TOKENS_QUERY = "query"  # multi-vector head, a query (every token kept, expansion included)
TOKENS_DOCUMENT = "document"  # multi-vector head, a document (skiplist tokens dropped)
