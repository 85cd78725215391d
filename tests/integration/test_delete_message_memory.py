"""A message deleted outright takes with it the profile fields and preferences it alone taught (real Postgres)."""

from __future__ import annotations

import uuid

from core.schemas import ExtractionResult, PreferenceUpdates, ProfileUpdates
from memory.forgetting import forget_message
from memory.user_memory import get_user_document
from memory.writer.extraction import apply_extraction


async def test_deleting_the_only_messages_that_taught_a_field_or_preference_clears_it_but_a_field_a_kept_message_taught_stays(backend, user_id):
    thread = str(uuid.uuid4())

    async def taught(message_id: str, **parts) -> None:
        await apply_extraction(backend.store, user_id, ExtractionResult(**parts), thread_id=thread, message_id=message_id)

    await taught("intro", profile_updates=ProfileUpdates(name="Rosa", role="nurse", location="Coimbra"))
    await taught("lang", new_preferences=PreferenceUpdates(language="Portuguese"))
    await taught("again", profile_updates=ProfileUpdates(location="Coimbra"))  # said again by a message that stays
    await taught("name", profile_updates=ProfileUpdates(name="Rosa"))  # said again, then deleted too

    # DELETE /chats/{id}/messages/{mid}, one message after the other
    for message_id in ("intro", "lang", "name"):
        await forget_message(backend.store, user_id, thread, message_id)

    doc = await get_user_document(backend.store, user_id)
    assert doc.profile.role is None and doc.preferences.language is None
    assert doc.profile.name is None  # every message that taught it is deleted, not only the last one
    assert doc.profile.location == "Coimbra"  # a message that still exists taught it too
    assert {"profile.role", "profile.name", "preferences.language"}.isdisjoint(doc.sources)
