"""Messages and threads on the DynamoDB table: idempotent ingest, time and stored-order listings,
thread rows (counts, titles, recycle bin), moves and purges."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from engram.adapters.storage.common import check_limit, thread_position, to_iso
from engram.adapters.storage.dynamodb.base import DynamoStoreBase, cursor_sort_key
from engram.adapters.storage.dynamodb.table import Cancelled, fields, sort_key, to_model
from engram.domain.deployment import TTL_ATTRIBUTE
from engram.domain.errors import Conflict, NotFound
from engram.domain.models import Message, Page, Thread


def _message_position(message: Message) -> tuple[datetime, str]:
    return message.created_at, message.id


def _message_keys(pk: str, item: dict[str, Any]) -> list[tuple[str, str]]:
    """A message's item and its id / external id pointers."""
    keys = [(pk, item["SK"]), (pk, f"MSGID#{item['id']}")]
    if item.get("external_id") is not None:
        keys.append((pk, f"MSGEXT#{item['external_id']}"))
    return keys


def _thread(item: dict[str, Any]) -> Thread:
    return to_model(Thread, {**item, "message_count": max(0, int(item.get("message_count") or 0))})


class DynamoMessages(DynamoStoreBase):
    # -- messages -------------------------------------------------------------------------
    def insert_message(self, message: Message) -> tuple[Message, bool]:
        stored_at = message.stored_at or message.created_at
        message = message.model_copy(update={"stored_at": stored_at})
        self._register(message.namespace)
        pk = self._pk(message.namespace)
        msg_sk = f"MSG#{to_iso(message.created_at)}#{message.id}"
        ttl = self._ttl(message.created_at, self._message_ttl)
        common = {"entity": "message_ref", "msg_sk": msg_sk, "message_id": message.id, TTL_ATTRIBUTE: ttl}
        in_thread = {
            "GSI1PK": f"{pk}#THR#{message.conversation_id}",
            "GSI1SK": sort_key(message.created_at, message.id),
            "GSI2PK": f"{pk}#MSGIN",
            "GSI2SK": sort_key(stored_at, message.id),
        }
        absent = "attribute_not_exists(PK)"
        item = {"PK": pk, "SK": msg_sk, "entity": "message", TTL_ATTRIBUTE: ttl, **in_thread, **fields(message)}
        operations = [
            self._db.put_operation(item, absent),
            self._db.put_operation({"PK": pk, "SK": f"MSGID#{message.id}", **common}, absent),
        ]
        if message.external_id is not None:
            operations.append(
                self._db.put_operation({"PK": pk, "SK": f"MSGEXT#{message.external_id}", **common}, absent)
            )
        operations.append(self._count_in_thread(message))  # last: the reasons above keep their places
        try:
            self._db.transact(operations)
        except Cancelled as exc:
            external_taken = len(exc.reasons) > 2 and exc.reasons[2] == "ConditionalCheckFailed"
            if message.external_id is not None and external_taken:
                stored = self._message_by_ref(message.namespace, f"MSGEXT#{message.external_id}")
                if stored is not None:
                    return stored, False
            raise Conflict(f"message {message.id} already exists") from exc
        return message, True

    def insert_messages(self, messages: Sequence[Message]) -> list[tuple[Message, bool]]:
        """One transaction per message: two of one thread in one ``TransactWriteItems`` would update its
        thread row twice, which DynamoDB refuses."""
        return [self.insert_message(message) for message in messages]

    def _count_in_thread(self, message: Message, *, old: bool = False) -> dict[str, Any]:
        """The thread's row, created with its first message; counted, moved to this message's time and
        taken out of the recycle bin by every message. An ``old`` message (``engram migrate``, older than
        the thread's others) only counts: the row's time and bin state stay as they are."""
        pk = self._pk(message.namespace)
        at = to_iso(message.created_at)
        place = (
            "last_message_at = if_not_exists(last_message_at, :at), GSI1PK = if_not_exists(GSI1PK, :live),"
            " GSI1SK = if_not_exists(GSI1SK, :sort)"
            if old
            else "last_message_at = :at, GSI1PK = :live, GSI1SK = :sort REMOVE deleted_at"
        )
        return {
            "Update": {
                "TableName": self._db.name,
                "Key": self._db.key(pk, f"THREAD#{message.conversation_id}"),
                "UpdateExpression": "SET entity = :entity, #id = :id, #ns = :ns,"
                f" created_at = if_not_exists(created_at, :at), {place} ADD message_count :one",
                "ExpressionAttributeNames": {"#id": "id", "#ns": "namespace"},
                "ExpressionAttributeValues": self._db.ser(
                    {
                        ":entity": "thread",
                        ":id": message.conversation_id,
                        ":ns": message.namespace,
                        ":at": at,
                        ":live": f"{pk}#THREADS#live",
                        ":sort": f"{at}#{message.conversation_id}",
                        ":one": 1,
                    }
                ),
            }
        }

    def _message_by_ref(self, namespace: str, ref_sk: str) -> Message | None:
        pk = self._pk(namespace)
        ref = self._db.get(pk, ref_sk)
        if ref is None:
            return None
        item = self._db.get(pk, ref["msg_sk"])
        return to_model(Message, item) if item else None

    def list_messages(
        self,
        namespace: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
        after_id: str | None = None,
    ) -> list[Message]:
        check_limit(limit)
        pk = self._pk(namespace)
        low = f"MSG#{to_iso(since)}" if since is not None else "MSG#"
        high = f"MSG#{to_iso(until)}" if until is not None else "MSG$"
        after_sk: str | None = None
        if after_id is not None:
            ref = self._db.get(pk, f"MSGID#{after_id}")
            if ref is None:
                raise NotFound(f"message {after_id} not found")
            after_sk = ref["msg_sk"]
            low = max(low, after_sk)
        if low > high:
            return []
        items = self._db.query(pk=pk, sk_between=(low, high), page_size=min(limit + 1, 1000))
        return self._first(items, limit, skip=("SK", after_sk))

    def list_messages_stored(
        self,
        namespace: str,
        *,
        after: tuple[datetime, str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
    ) -> list[Message]:
        check_limit(limit)
        low = to_iso(since) if since is not None else "0"
        skip = None
        if after is not None:
            skip = sort_key(*after)
            low = max(low, skip)
        high = to_iso(until) if until is not None else "\uffff"
        if low > high:
            return []
        items = self._db.query(
            pk=f"{self._pk(namespace)}#MSGIN", index="GSI2", sk_between=(low, high), page_size=min(limit + 1, 1000)
        )
        return self._first(items, limit, skip=("GSI2SK", skip))

    @staticmethod
    def _first(items: Iterator[dict[str, Any]], limit: int, *, skip: tuple[str, str | None]) -> list[Message]:
        """The first ``limit`` messages of ``items``, leaving out the one whose ``skip[0]`` is ``skip[1]``."""
        attribute, value = skip
        rows: list[Message] = []
        for item in items:
            if value is not None and item[attribute] == value:
                continue
            rows.append(to_model(Message, item))
            if len(rows) >= limit:
                break
        return rows

    def count_messages(self, namespace: str, *, since: datetime | None = None) -> int:
        low = f"MSG#{to_iso(since)}" if since is not None else "MSG#"
        return self._db.count(pk=self._pk(namespace), sk_between=(low, "MSG$"))

    def delete_messages_before(self, namespace: str, before: datetime) -> int:
        pk = self._pk(namespace)
        doomed: list[tuple[str, str]] = []
        count = 0
        items = self._db.query(
            pk=pk,
            sk_between=("MSG#", f"MSG#{to_iso(before)}"),
            projection=("PK", "SK", "id", "external_id", "conversation_id"),
        )
        per_thread: dict[str, int] = {}
        for item in items:
            count += 1
            doomed += _message_keys(pk, item)
            thread = str(item.get("conversation_id") or "default")
            per_thread[thread] = per_thread.get(thread, 0) + 1
        self._db.batch_delete(doomed)
        for thread, gone in per_thread.items():
            # No row (a message stored before threads existed): nothing to count.
            self._db.update(
                pk,
                f"THREAD#{thread}",
                UpdateExpression="ADD message_count :delta",
                ConditionExpression="attribute_exists(PK)",
                ExpressionAttributeValues=self._db.ser({":delta": -gone}),
            )
        return count

    # -- threads ----------------------------------------------------------------------------
    def get_thread(self, namespace: str, thread_id: str) -> Thread:
        item = self._db.get(self._pk(namespace), f"THREAD#{thread_id}")
        if item is None:
            raise NotFound(f"thread {thread_id} not found")
        return _thread(item)

    def list_threads(
        self, namespace: str, *, deleted: bool = False, limit: int = 50, cursor: str | None = None
    ) -> Page[Thread]:
        check_limit(limit)
        partition = f"{self._pk(namespace)}#THREADS#{'deleted' if deleted else 'live'}"
        items = self._db.query(
            pk=partition, index="GSI1", sk_before=cursor_sort_key(cursor), forward=False, page_size=min(limit + 1, 500)
        )
        return self._page(items, _thread, limit, thread_position)

    def update_thread(
        self, namespace: str, thread_id: str, *, title: str | None, deleted_at: datetime | None
    ) -> Thread:
        pk = self._pk(namespace)
        values: dict[str, Any] = {":live": f"{pk}#THREADS#{'live' if deleted_at is None else 'deleted'}"}
        sets = ["GSI1PK = :live"]
        removes = []
        for name, value in (("title", title), ("deleted_at", to_iso(deleted_at) if deleted_at else None)):
            if value is None:
                removes.append(name)
            else:
                sets.append(f"{name} = :{name}")
                values[f":{name}"] = value
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        response = self._db.update(
            pk,
            f"THREAD#{thread_id}",
            UpdateExpression=expression,
            ConditionExpression="attribute_exists(PK)",
            ExpressionAttributeValues=self._db.ser(values),
            ReturnValues="ALL_NEW",
        )
        if response is None:
            raise NotFound(f"thread {thread_id} not found")
        return _thread(self._db.des(response["Attributes"]))

    def _thread_items(self, namespace: str, thread_id: str, after: str | None = None) -> Iterator[dict[str, Any]]:
        partition = f"{self._pk(namespace)}#THR#{thread_id}"
        if after is None:
            return self._db.query(pk=partition, index="GSI1")
        items = self._db.query(pk=partition, index="GSI1", sk_between=(after, "\uffff"))
        return (i for i in items if i["GSI1SK"] != after)

    def list_thread_messages(
        self, namespace: str, thread_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> Page[Message]:
        check_limit(limit)
        items = self._thread_items(namespace, thread_id, cursor_sort_key(cursor))
        return self._page(items, lambda item: to_model(Message, item), limit, _message_position)

    def get_messages(self, namespace: str, message_ids: Sequence[str]) -> list[Message]:
        pk = self._pk(namespace)
        refs = self._db.batch_get([(pk, f"MSGID#{message_id}") for message_id in dict.fromkeys(message_ids)])
        items = self._db.batch_get([(pk, str(ref["msg_sk"])) for ref in refs if ref.get("msg_sk")])
        found = {message.id: message for message in (to_model(Message, item) for item in items)}
        return [found[message_id] for message_id in message_ids if message_id in found]

    def messages_around(self, namespace: str, message: Message, *, before: int, after: int) -> list[Message]:
        # The thread's index (GSI1), both ways from the message's own sort key.
        partition = f"{self._pk(namespace)}#THR#{message.conversation_id}"
        position = sort_key(message.created_at, message.id)
        earlier: list[Message] = []
        if before > 0:
            items = self._db.query(pk=partition, index="GSI1", sk_before=position, forward=False, page_size=before)
            earlier = [to_model(Message, item) for item in itertools.islice(items, before)]
        later: list[Message] = []
        if after > 0:
            items = self._db.query(pk=partition, index="GSI1", sk_between=(position, "\uffff"), page_size=after + 1)
            later = [to_model(Message, i) for i in itertools.islice(items, after + 1) if i["GSI1SK"] != position]
        return [*reversed(earlier), message, *later[:after]]

    def move_thread(self, namespace: str, source: str, target: str) -> int:
        pk = self._pk(namespace)
        into = self.get_thread(namespace, target)
        gone = self._db.get(pk, f"THREAD#{source}")
        moved = 0
        for item in list(self._thread_items(namespace, source)):
            self._db.update(
                pk,
                item["SK"],
                UpdateExpression="SET conversation_id = :to, GSI1PK = :thread",
                ExpressionAttributeValues=self._db.ser({":to": target, ":thread": f"{pk}#THR#{target}"}),
            )
            moved += 1
        if gone is not None:
            latest = max(
                filter(
                    None, (to_iso(into.last_message_at) if into.last_message_at else None, gone.get("last_message_at"))
                ),
                default=None,
            )
            values: dict[str, Any] = {":n": int(gone.get("message_count") or 0)}
            expression = "ADD message_count :n"
            if latest is not None:
                expression = "SET last_message_at = :at, GSI1SK = :sort " + expression
                values[":at"], values[":sort"] = latest, f"{latest}#{target}"
            self._db.update(
                pk,
                f"THREAD#{target}",
                UpdateExpression=expression,
                ExpressionAttributeValues=self._db.ser(values),
            )
            self._db.delete(pk, f"THREAD#{source}")
        return moved

    def purge_thread(self, namespace: str, thread_id: str) -> int:
        pk = self._pk(namespace)
        doomed: list[tuple[str, str]] = []
        for item in self._thread_items(namespace, thread_id):
            doomed += _message_keys(pk, item)
        count = sum(1 for _, sk in doomed if sk.startswith("MSG#"))
        self._db.batch_delete(doomed)
        self._db.delete(pk, f"THREAD#{thread_id}")
        return count
