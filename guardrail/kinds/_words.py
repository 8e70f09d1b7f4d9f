"""Plain English words: what a kind's pattern must never take from a user's text as an id.

A pattern that matches ``close``, ``issue`` or ``please`` turns every message
into a handful of "ids" the user typed. The guard tries each pattern on these
words (as written mid-sentence and at its start) when the kind is declared,
and watches for them in what ``observe_user`` takes. The list is short on
purpose: the most frequent words of English and the words of support
conversations, where agents run.
"""

from __future__ import annotations

from typing import Final

COMMON_WORDS: Final = frozenset(
    """
    a about above account add address after again agent all also am an and any
    anything are arrived as ask at available away back bank be because been before
    being below best between bill billing book booking both broke broken but buy by
    call can cancel card cart change charge charged chat check city close closed
    code come confirm contact could customer damaged data date day days delete
    delivery did do does done down each email even every fee file find first fix
    flight for from get give go good got great had has have he hello help her here
    hi him his home hotel how i if in into invoice is issue it its item items just
    keep know last late like link list login look made mail make many me message
    might money month more most much my name need new next no not now number of off
    office ok okay old on once one only open or order orders other our out over
    package paid password pay payment people phone plan please plus price problem
    product purchase put question quick received refund reply request reservation
    reset return right said same see seat send sent service set she ship shipping
    should show sign since so some soon sorry start status still stop store
    subscription support sure take team tell than thank thanks that the their them
    then there these they thing this those through ticket time to today too total
    track transfer trip try two under until up update urgent us use user very wait
    want was way we week well were what when where which while who why will with
    work would wrong year yes yesterday you your
    """.split()
)
