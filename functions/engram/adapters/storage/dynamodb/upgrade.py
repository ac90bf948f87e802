"""One-off upgrades of rows written by older versions (``engram migrate``; README, "Upgrading").

Messages stored before threads existed have no thread index keys (GSI1 ``NS#ns#THR#<thread>``) and no
thread row counting them; messages stored before insertion order existed have no ``stored_at`` and no
stored-order keys (GSI2 ``NS#ns#MSGIN``). Such a message is invisible to the thread listings, to
extraction and to conversation recall. ``backfill_message_indexes`` walks a namespace's messages in
base-table order and writes what is missing, each message with a condition on the attribute it adds,
so a repeated or concurrent run changes nothing twice (a thread is counted once per message).
"""

from __future__ import annotations

from typing import Any

from engram.adapters.storage.common import to_iso
from engram.adapters.storage.dynamodb.messages import DynamoMessages
from engram.adapters.storage.dynamodb.table import Cancelled, sort_key, to_model
from engram.domain.models import Message


class DynamoUpgrades(DynamoMessages):
    """``DynamoMessages`` with the upgrade of messages older versions stored (module docstring)."""

    def backfill_message_indexes(self, namespace: str, *, after: str | None, limit: int) -> tuple[int, int, str | None]:
        """Up to ``limit`` messages of the namespace after position ``after`` (an opaque string from the
        previous call; ``None`` to start), each given the index keys it lacks. Returns (messages read,
        messages fixed, the position to continue from, or ``None`` when the namespace is done)."""
        pk = self._pk(namespace)
        low = after or "MSG#"
        read = fixed = 0
        last: str | None = None
        for item in self._db.query(pk=pk, sk_between=(low, "MSG$"), page_size=min(limit + 1, 1000)):
            if item["SK"] == after:
                continue
            read += 1
            fixed += self._backfill_message(pk, item)
            last = item["SK"]
            if read >= limit:
                return read, fixed, last
        return read, fixed, None

    def _backfill_message(self, pk: str, item: dict[str, Any]) -> bool:
        message = to_model(Message, item)
        stored_at = message.stored_at or message.created_at
        stored = {"GSI2PK": f"{pk}#MSGIN", "GSI2SK": sort_key(stored_at, message.id), "stored_at": to_iso(stored_at)}
        if "GSI1PK" in item:
            if "GSI2PK" in item:
                return False
            # On the thread index already: only the stored order is missing.
            return (
                self._db.update(
                    pk,
                    item["SK"],
                    UpdateExpression="SET GSI2PK = :gsi2pk, GSI2SK = :gsi2sk,"
                    " stored_at = if_not_exists(stored_at, :st)",
                    ConditionExpression="attribute_exists(PK) AND attribute_not_exists(GSI2PK)",
                    ExpressionAttributeValues=self._db.ser(
                        {":gsi2pk": stored["GSI2PK"], ":gsi2sk": stored["GSI2SK"], ":st": stored["stored_at"]}
                    ),
                )
                is not None
            )
        keys = {
            ":gsi1pk": f"{pk}#THR#{message.conversation_id}",
            ":gsi1sk": sort_key(message.created_at, message.id),
            ":gsi2pk": stored["GSI2PK"],
            ":gsi2sk": stored["GSI2SK"],
            ":st": stored["stored_at"],
        }
        on_thread_index = {
            "Update": {
                "TableName": self._db.name,
                "Key": self._db.key(pk, item["SK"]),
                "UpdateExpression": "SET GSI1PK = :gsi1pk, GSI1SK = :gsi1sk, GSI2PK = if_not_exists(GSI2PK, :gsi2pk),"
                " GSI2SK = if_not_exists(GSI2SK, :gsi2sk), stored_at = if_not_exists(stored_at, :st)",
                "ConditionExpression": "attribute_exists(PK) AND attribute_not_exists(GSI1PK)",
                "ExpressionAttributeValues": self._db.ser(keys),
            }
        }
        try:
            self._db.transact([on_thread_index, self._count_in_thread(message, old=True)])
        except Cancelled:  # another run did this message first (or it is gone)
            return False
        self._move_thread_forward(message)
        return True

    def _move_thread_forward(self, message: Message) -> None:
        """The thread's last message time becomes this message's if it is later (never earlier)."""
        pk = self._pk(message.namespace)
        at = to_iso(message.created_at)
        self._db.update(
            pk,
            f"THREAD#{message.conversation_id}",
            UpdateExpression="SET last_message_at = :at, GSI1SK = :sort",
            ConditionExpression="attribute_exists(PK) AND last_message_at < :at",
            ExpressionAttributeValues=self._db.ser({":at": at, ":sort": f"{at}#{message.conversation_id}"}),
        )
