"""Custody of the utterance path: outbox, duplicate filter, when to send again."""

from __future__ import annotations

from voxweft.actors.custody import Outbox, Resync, Seen
from voxweft.protocol.messages import SpeechChunk, Status, Transcript


def speech(utt, index):
    return SpeechChunk(utt=utt, index=index)


def test_outbox_keeps_until_done_in_order_and_is_bounded():
    box = Outbox(limit=3)
    for msg in (speech("a", 0), speech("b", 0), speech("a", 1), speech("c", 0)):
        assert box.keep(msg) is None
    assert [(m.utt, m.index) for m in box.all()] == [("a", 0), ("a", 1), ("b", 0), ("c", 0)]
    assert box.release("a") and not box.release("a") and len(box) == 2
    box.keep(speech("d", 0))
    assert box.keep(speech("e", 0)) == "b"   # the oldest is forgotten, and counted
    assert box.dropped == 1 and [m.utt for m in box.all()] == ["c", "d", "e"]


def test_seen_tells_duplicates_by_type_utterance_and_index():
    seen = Seen(limit=2)
    seen.add(speech("a", 0))
    assert speech("a", 0) in seen and speech("a", 1) not in seen
    assert Transcript(utt="a") not in seen
    seen.add(speech("a", 1))
    seen.add(speech("a", 2))
    assert speech("a", 0) not in seen   # bounded: the oldest is forgotten


def test_drafts_are_neither_held_nor_remembered():
    box, seen = Outbox(), Seen()
    draft = Transcript(utt="a", text="The book", final=False)
    assert box.keep(draft) is None and len(box) == 0
    seen.add(draft)
    assert draft not in seen
    final = Transcript(utt="a", text="The book is on the table.")
    assert final not in seen   # the final message of the utterance is new after its draft
    box.keep(final)
    seen.add(final)
    assert list(box.all()) == [final] and final in seen
    assert Transcript(utt="a", text="The book", final=False) not in seen   # drafts: always new


def status(epoch, peers, links=None):
    return Status(src="mt", epoch=epoch, peers=peers, links=links or {})


def test_resync_sends_again_when_the_next_stage_restarts_or_rejoins():
    sync = Resync("asr", epoch=100)
    assert not sync.check(status(7, {}))             # does not hear us yet
    assert sync.check(status(7, {"asr": 100}))       # joined: send what we hold
    assert not sync.check(status(7, {"asr": 100}))   # nothing changed
    assert sync.check(status(8, {"asr": 100}))       # restarted (new epoch)
    assert sync.check(status(8, {"asr": 100}, {"asr": 1}))   # its link to us broke
    assert not sync.check(status(8, {"asr": 99}))    # hears an older us: wait
    assert sync.check(status(8, {"asr": 100}, {"asr": 1}))   # hears us again
