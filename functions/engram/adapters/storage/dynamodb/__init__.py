"""``MemoryStore`` on one DynamoDB table (the AWS deployment's source of truth).

Modules: ``table.py`` is the table toolkit (value conversion, calls with error translation, queries,
transactions, batches); ``store.py`` composes ``DynamoMemoryStore`` from one part per concern —
``memories.py`` (memories, candidates), ``messages.py`` (messages, threads), ``notes.py`` (reminders,
precious, glossary, digest, daily logs), ``records.py`` (events, usage, idempotency, cursors, cache,
namespaces) — over ``base.py`` (what the parts share).

Item layout (``ns`` = namespace; timestamps are fixed-width ISO-8601 UTC, so text order is time order):

=========================  ==============================  ===========================================
item                       PK / SK                         GSI1 (listing) / GSI2 (sweeps)
=========================  ==============================  ===========================================
memory                     ``NS#ns`` / ``MEM#<id>``        ``NS#ns#MEM#<status>`` / ``<created>#<id>``;
                                                           GSI2 same PK / ``<sweep time>#<id>``
active fact_key lock       ``NS#ns`` / ``MEMKEY#<key>``    (``memory_id`` of the one active memory)
memory external_id lock    ``NS#ns`` / ``MEMEXT#<ext>``    (``memory_id``)
candidate                  ``NS#ns`` / ``CAND#<id>``       ``NS#ns#CAND#<status>`` / ``<created>#<id>``
message                    ``NS#ns`` / ``MSG#<created>#<id>``  ``NS#ns#THR#<conversation>`` / ``<created>#<id>``
                                                           (base table order = list order; GSI1 = thread);
                                                           GSI2 ``NS#ns#MSGIN`` / ``<stored>#<id>``
thread                     ``NS#ns`` / ``THREAD#<id>``     ``NS#ns#THREADS#<live|deleted>`` /
                                                           ``<last message or created>#<id>``
message id pointer         ``NS#ns`` / ``MSGID#<id>``      (``msg_sk``; makes ids unique)
message external_id lock   ``NS#ns`` / ``MSGEXT#<ext>``    (``msg_sk``; idempotent ingest)
reminder                   ``NS#ns`` / ``REMIND#<memory>``  ``NS#ns#REMIND#<status>`` / ``<remind_at>#<memory>``
precious / glossary        ``NS#ns`` / ``PREC#<id>``, ``GLOSS#<id>``
digest / daily log         ``NS#ns`` / ``DIGEST``, ``DAY#<yyyy-mm-dd>``
event                      ``NS#ns`` / ``EVT#<id>``        ``NS#ns#EVT`` / ``<created>#<id>``;
                                                           GSI2 ``NS#ns#EVTMEM#<memory>`` / same
journal run record         ``NS#ns`` / ``EVT#<run id>``    as an event; GSI2 ``NS#ns#RUNS`` / ``<created>#<id>``
journal change             ``NS#ns`` / ``RUN#<run>#<id>``  as an event (docs/journal.md; a run's changes
                                                           are one base-table query, in the order written)
usage                      ``NS#ns`` / ``USAGE#<id>``      ``NS#ns#USAGE`` / ``<created>#<id>``
idempotency key, cursor    ``NS#ns`` / ``IDEM#<key>``, ``CURSOR#<name>``
cache entry                ``NS#ns`` / ``CACHE#<key>``     (value kept as JSON text in ``value_json``)
namespace registry         ``NAMESPACES`` / ``<ns>``
rate-limit counter         ``RATE#<key>`` / ``W#<window start>``  (written by ``adapters/ratelimit/dynamodb.py``)
=========================  ==============================  ===========================================

Every access is a GetItem, a Query or a transaction; nothing scans. Rows keep their fields as plain
attributes (plus ``kind``) so they read well in the console. Messages, usage, events (not the
journal's: its retention is the cleanup job's), idempotency keys and expiring cache entries carry a
``ttl`` (epoch seconds) as a backstop to the cleanup job.
Memory sweep time (GSI2) is the last sighting for active rows and the status change for the others.

Consistency: GetItem, base-table queries (messages, precious, glossary, daily logs, idempotency) and
the uniqueness locks are strongly consistent; listings served from a GSI (memories, candidates,
events, usage) are eventually consistent, usually within a second.
"""

from engram.adapters.storage.dynamodb.store import DynamoMemoryStore
from engram.adapters.storage.dynamodb.table import create_table
from engram.domain.deployment import TABLE_INDEXES, TABLE_KEYS

__all__ = ["TABLE_INDEXES", "TABLE_KEYS", "DynamoMemoryStore", "create_table"]
