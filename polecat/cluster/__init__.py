"""polecat.cluster: slice ownership and hand-over between members (DESIGN.md §5).

Who the members are (:mod:`.membership`), which member owns which slice (:mod:`.ring`), and how URLs for
another member's slices reach it (:mod:`.batch`, :mod:`.outbox`, :mod:`.sender`, :mod:`.handoff`,
:mod:`.receiver`, :mod:`.transport`).
"""
