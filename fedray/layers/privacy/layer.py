"""The server side of the privacy protocols: :class:`PrivacyLayer`, the executor layer that runs
secure aggregation around each call to clients (see :mod:`fedray.layers.privacy` for the protocol)."""
from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import Any

import numpy as np

from fedray.core.calls import Call
from fedray.core.contract import Reply, Task
from fedray.core.errors import DataError, ReleaseRefusedError, RoundFailedError
from fedray.core.sizes import nbytes_of
from fedray.core.stats import Stats
from fedray.layers.messages import Envelope
from fedray.layers.privacy.accountant import new_account
from fedray.layers.privacy.client import (
    private_call,
    secagg_register,
    secagg_share_keys,
    secagg_unmask,
)
from fedray.layers.privacy.codec import MOD, MaskedStats, decode, layout_of, prg, template
from fedray.layers.privacy.dp import noise_std, round_multiplier, weak_noise
from fedray.layers.privacy.guards import count_small_clusters, fill_withheld, per_cluster_support
from fedray.layers.privacy.journal import Journal
from fedray.layers.privacy.keys import CT_BYTES, mask_peers, pair_seed, pk_bytes, sk_from_int
from fedray.layers.privacy.release import (
    Release,
    ReleaseLog,
    conflict_message,
    refusal_fixes,
    release_of,
    shared_log,
)
from fedray.layers.privacy.shamir import shamir_combine, threshold
from fedray.layers.settings import PrivacySettings
from fedray.runtime.executor import ExecResult, Executor, ExecutorWrapper

log = logging.getLogger(__name__)


Keys = dict[int, dict[str, Any]]  # per client of an instance: s_pk, c_pk, ct, peers, t
OUTSIDE_KINDS = ("setup", "adhoc")  # kinds of the calls a session makes outside runs


def _stack(rows: list[Any], width: int) -> np.ndarray:
    return np.stack(rows) if rows else np.zeros((0, width), np.uint8)


class PrivacyLayer(ExecutorWrapper):
    """Executor layer: runs secure aggregation around each task, guards, noises and masks the
    clients' statistics, and unmasks the total on the server side before the algorithm sees it.

    Parameters
    ----------
    inner : Executor
    privacy : PrivacySettings
        Built from ``privacy`` by :func:`fedray.api.settings.privacy_settings`.
    seed : int
        The experiment seed: it picks the public mask graph only; no secret derives from it.
    disclosures : dict of str to int, optional
        Disclosures counted before the run (the session's set-up), merged into the account
        (and into every new account, see :meth:`reset_records`).
    """

    def __init__(self, inner: Executor, privacy: PrivacySettings, seed: int,
                 disclosures: dict[str, int] | None = None) -> None:
        super().__init__(inner)
        self.cfg = privacy
        self.seed = int(seed)
        # the session's set-up disclosures (a live reference: counted when each run starts)
        self._disclosures = disclosures if disclosures is not None else {}
        self.account: dict[str, Any] = new_account()
        self.account["disclosures"] = dict(self._disclosures)
        self._run = os.urandom(8).hex()  # label of this layer's protocol instances (public, not a secret)
        self._instance = 0  # number of the last protocol instance (one per call under secure aggregation)
        self._cpk: dict[int, bytes] = {}  # registered long-lived public keys (relayed, public)
        self.transcript: dict[str, Any] = {}  # what the server held in the last instance (audits, tests)
        self._outside: list[dict[str, Any]] = []  # releases of calls outside runs (kept in every run's account)
        # the sums released so far (the release rule, fedray.layers.privacy.release): the federation's log
        # once the session knows its fingerprint (join_federation), kept across runs and sessions
        self.releases = ReleaseLog(privacy.min_cohort)
        self.fingerprint: str | None = None
        self.blocks: np.ndarray | None = None  # each client's fixed block (privacy.cohorts: blocks)
        self.run_key = ""  # the run's name in the release log ("" outside runs)
        self.run_name = "the session's set-up"  # the run, as refusals name it

    def join_federation(self, fingerprint: str) -> None:
        """Use the release log of federation ``fingerprint`` in this process (every layer over the same
        clients shares it), with what this layer released so far (the set-up sums) added to it."""
        shared = shared_log(fingerprint, self.cfg.min_cohort)
        if shared is not self.releases:
            for r in self.releases.released:
                shared.add(r)
            self.releases = shared
        self.fingerprint = fingerprint

    def begin_run(self, key: str, name: str, folder: Any = None) -> int:
        """A run starts: ``key`` names it in the release log (a resumed run keeps its first key), ``name``
        in refusals; ``folder`` (None: none) holds the federation's journal on disk, read now and
        appended at each release. Returns how many releases the journal held."""
        self.run_key, self.run_name = str(key), str(name)
        if folder is None or self.fingerprint is None:
            self.releases.attach(None)
            return 0
        return self.releases.attach(Journal(folder, self.fingerprint))

    def end_run(self) -> None:
        """The run is over: later calls are the session's own."""
        self.run_key, self.run_name = "", "the session (outside runs)"

    @property
    def whole_cohort_retries(self) -> bool:  # type: ignore[override]
        return bool(self.cfg.secure_aggregation) or self.inner.whole_cohort_retries

    def _disclose(self, kind: str, n: int) -> None:
        if n:
            d = self.account.setdefault("disclosures", {})
            d[kind] = int(d.get(kind, 0)) + int(n)

    def reset_records(self) -> None:
        """Start a new run's account (and the records of the layers below): nothing counted yet but the
        session's disclosures so far and the releases of calls outside runs (set-up, K selection,
        validation, plots), which every run's account lists. The registered long-lived public keys
        stay, and so does the instance counter (no protocol instance label repeats)."""
        for r in self.account["releases"]:
            if r["kind"] in OUTSIDE_KINDS and r not in self._outside:
                self._outside.append(r)
        self.account = new_account()
        self.account["disclosures"] = dict(self._disclosures)
        self.account["releases"] = list(self._outside)
        self.transcript = {}
        self.inner.reset_records()

    def _protocol(self, call: Call, tasks: dict[int, Task], timeout: float | None) -> ExecResult:
        """One protocol step straight to the clients' hosts (the relay is simulated; see the module doc)."""
        res = self.base.execute(call, tasks, timeout)
        self.account["protocol_messages"] += len(tasks) + len(res.replies)
        self.account["protocol_bytes"] += sum(nbytes_of(t.payload) for t in tasks.values())
        self.account["protocol_bytes"] += sum(nbytes_of(r.update) for r in res.replies)
        return res

    def execute(self, call: Call, tasks: dict[int, Task], timeout: float | None = None) -> ExecResult:
        """Run ``call`` under the configuration: secure aggregation, guards and (training calls) DP noise."""
        return self._execute(self.cfg, call, tasks, timeout)

    def secure_sum(self, call: Call, tasks: dict[int, Task], timeout: float | None = None) -> Stats:
        """The total of ``tasks``' statistics through secure aggregation alone, whatever
        ``privacy.secure_aggregation`` says: no DP noise, no guard.

        The tasks go through the layers below (a message log records the masked vectors) and the
        protocol is counted in this layer's account. Used by the session for its set-up moments
        and plots.

        ``call`` (usually ``SETUP`` or ``ADHOC``) keys the public mask graph; each of ``tasks`` returns a
        :class:`~fedray.core.stats.Stats`; ``timeout``: seconds each step may take (None: no limit).
        Returns the exact total (2^-64 per client). Raises :class:`DataError` (a client's function raised
        one: the first client's message) or :class:`RoundFailedError` (the call is refused, or a client did
        not answer)."""
        cfg = replace(self.cfg, dp=None, min_samples_guard=False, min_cluster_count=0, secure_aggregation=True)
        res = self._execute(cfg, call, tasks, timeout)
        if res.user_errors:
            raise DataError(res.user_errors[min(res.user_errors)])
        if len(res.replies) < len(tasks):
            first = next(iter(res.errors.values()), "no reply")
            raise RoundFailedError(f"secure sum: {len(tasks) - len(res.replies)} of {len(tasks)} clients did not "
                                   f"answer: {first.strip().splitlines()[-1] if first.strip() else first}")
        return sum((r.update for r in res.replies[1:]), start=res.replies[0].update)

    def _execute(self, cfg: PrivacySettings, call: Call, tasks: dict[int, Task], timeout: float | None) -> ExecResult:
        """One call under ``cfg``: key sharing, the wrapped tasks, then unmasking, guards and the DP account."""
        cohort = sorted(tasks)
        training = call.training
        sa = bool(cfg.secure_aggregation)
        dp = cfg.dp if training else None
        dp_std = None if dp is None else noise_std(dp, len(cohort), sa)
        extra: dict[str, Any] = {"label": call.label(), "stream_round": call.stream_round, "attempt": call.attempt,
                                 "mask": sa, "guard": cfg.min_samples_guard and training,
                                 "min_cluster_count": cfg.min_cluster_count}
        if dp_std is not None:
            extra.update(dp_std=dp_std, clip=dp.clip, seeded_noise=bool(dp.seeded_noise))
        weak = dp is not None and sa and weak_noise(dp, len(cohort), len(cohort), True)
        extra["support"] = sa and (dp_std is None or weak)  # each cluster's contributors, summed with the sums
        dropped_early: dict[int, str] = {}
        peers: dict[int, list[int]] = {}
        keys: Keys = {}
        if sa:
            self._check_cohort(cfg, call, cohort)
            self._instance += 1
            extra.update(run=self._run, instance=self._instance)
            peers, keys, dropped_early = self._share_keys(cfg, call, cohort, timeout)
        sent = {cid: self._wrap(tasks[cid], extra, peers, keys, cid) for cid in cohort if cid not in dropped_early}
        res = self.inner.execute(call, sent, timeout)
        for cid, why in dropped_early.items():
            res.failed.append(cid)
            res.errors[cid] = why
        res.failed.sort()
        n_stats = self._count_replies(cfg, res, call, dp_std is not None)
        if sa:
            weak = dp is not None and weak_noise(dp, max(1, n_stats), len(cohort), True)
            if weak and n_stats:
                self.account["weak_noise"] += 1
            self._unmask(cfg, res, keys, call, timeout, noised=dp_std is not None and not weak)
        if cfg.min_samples_guard and training:
            fill_withheld(res, call)
        if dp is not None and n_stats:
            answered = n_stats if sa else len(cohort)
            self.account["rounds"].append({"round": call.round, "attempt": call.attempt,
                                           "z": round_multiplier(dp, answered, len(cohort), sa)})
        return res

    def _check_cohort(self, cfg: PrivacySettings, call: Call, cohort: list[int]) -> None:
        """Refuse a cohort below ``privacy.min_cohort`` before anything is sent."""
        if len(cohort) < cfg.min_cohort:
            self.account["refused_rounds"] += 1
            raise ReleaseRefusedError(
                f"{self.run_name}: {call.label()}: secure aggregation refused: a cohort of {len(cohort)} client(s) "
                f"is below privacy.min_cohort={cfg.min_cohort}, so its sum would single out {len(cohort)} "
                f"client(s); fixes: sample more clients (federation.fraction) or lower privacy.min_cohort")

    def _wrap(self, t: Task, extra_base: dict[str, Any], peers: dict[int, list[int]], keys: Keys, cid: int) -> Task:
        """Client ``cid``'s task wrapped in :func:`private_call`, with its peers' public keys and its inbox."""
        extra = dict(extra_base)
        if extra["mask"]:
            ps = peers[cid]
            inbox = [(s, keys[s]["ct"][keys[s]["peers"].index(cid)]) for s in ps if cid in keys[s]["peers"]]
            extra.update(peers=np.asarray(ps, dtype=np.int64),
                         peer_spk=_stack([keys[p]["s_pk"] for p in ps], 32),
                         inbox_ids=np.asarray([s for s, _ in inbox], dtype=np.int64),
                         inbox_cpk=_stack([keys[s]["c_pk"] for s, _ in inbox], 32),
                         inbox_ct=_stack([c for _, c in inbox], CT_BYTES))
        return Task(private_call, Envelope(t.fn, t.payload, extra), t.shared, t.evaluation)

    def _count_replies(self, cfg: PrivacySettings, res: ExecResult, call: Call, noised: bool) -> int:
        """Count withheld, unprotected and (in the clear, unguarded) small-cluster replies, and the
        per-client statistics released in the clear (no secure aggregation); returns the statistics."""
        acc = self.account
        training = call.training
        n_stats = 0
        clear: list[int] = []
        layout = ""
        for r in res.replies:
            if r.update is None:
                acc["withheld"] += training and cfg.min_samples_guard
            elif isinstance(r.update, (Stats, MaskedStats)):
                n_stats += 1
                if isinstance(r.update, Stats):
                    clear.append(r.client_id)
                    layout = layout or layout_of(r.update)
                    if not noised and not cfg.min_cluster_count:
                        self._disclose("small_clusters", count_small_clusters(r.update))
            else:
                acc["unprotected_messages"] += 1
        if clear:  # each of these is one client's statistics: a release of its own
            acc["releases"].append({**release_of(call, clear, layout, noised).row(), "summed": False})
        return n_stats

    # --- SecAgg steps 0 and 1 -------------------------------------------------------------
    def _register(self, call: Call, cohort: list[int], timeout: float | None) -> dict[int, str]:
        """Step 0 for clients without a registered long-lived key; returns those that did not answer."""
        dropped: dict[int, str] = {}
        unknown = [c for c in cohort if c not in self._cpk]
        if unknown:
            res = self._protocol(call, {c: Task(secagg_register, None, None) for c in unknown}, timeout)
            for r in res.replies:
                self._cpk[r.client_id] = bytes(r.update["c_pk"])
            for c in unknown:
                if c not in self._cpk:
                    dropped[c] = f"client {c}: no answer to secure-aggregation registration"
        return dropped

    def _share_keys(self, cfg: PrivacySettings, call: Call, cohort: list[int], timeout: float | None
                    ) -> tuple[dict[int, list[int]], Keys, dict[int, str]]:
        """Steps 0 and 1 of instance ``self._instance``: the peers, the clients' keys and who dropped out."""
        dropped = self._register(call, cohort, timeout)
        live = [c for c in cohort if c not in dropped]
        peers = mask_peers(live, cfg.mask_neighbors, self.seed, call.stream_round, call.attempt)
        tasks = {}
        for c in live:
            ps = peers[c]
            tasks[c] = Task(secagg_share_keys, {"run": self._run, "instance": self._instance, "peers": ps,
                                                "t": threshold(len(ps), cfg.secagg_threshold),
                                                "peer_cpk": [self._cpk[p] for p in ps]}, None)
        res = self._protocol(call, tasks, timeout)
        keys: Keys = {}
        for r in res.replies:
            u = r.update
            self._cpk[r.client_id] = bytes(u["c_pk"])
            keys[r.client_id] = {"s_pk": u["s_pk"], "c_pk": u["c_pk"], "ct": list(u["ct"]),
                                 "peers": list(tasks[r.client_id].payload["peers"]),
                                 "t": tasks[r.client_id].payload["t"]}
        for c in live:
            if c not in keys:
                dropped[c] = f"client {c}: no answer to secure-aggregation key sharing"
        # Clients that did not share their keys take no part: nobody masks with them.
        peers = {c: [p for p in peers[c] if p in keys] for c in keys}
        self.transcript = {"call": call, "run": self._run, "instance": self._instance, "c_pk": dict(self._cpk),
                           "s_pk": {c: bytes(k["s_pk"]) for c, k in keys.items()},
                           "ciphertexts": {c: [bytes(x) for x in k["ct"]] for c, k in keys.items()},
                           "peers": {c: list(p) for c, p in peers.items()}, "masked": {}, "revealed": {}}
        return peers, keys, dropped

    # --- SecAgg step 3 --------------------------------------------------------------------
    def _unmask(self, cfg: PrivacySettings, res: ExecResult, keys: Keys, call: Call, timeout: float | None,
                noised: bool = False) -> None:
        """Replace the masked replies by the unmasked total (first reply) and zeros, or refuse the round
        (too few survivors, the release rule or the call's quorum)."""
        masked = [(k, r) for k, r in enumerate(res.replies) if isinstance(r.update, MaskedStats)]
        if not masked:
            return
        self.transcript["masked"] = {r.client_id: r.update for _, r in masked}
        layouts = {r.update.layout for _, r in masked}
        if len(layouts) > 1:
            raise RoundFailedError(f"{call.label()}: secure aggregation needs one statistics layout per call; "
                                   f"clients sent {sorted(layouts)}")
        layout = layouts.pop()
        arrived = sorted(r.client_id for _, r in masked)
        if len(arrived) < call.quorum:  # the caller would throw the sum away: never unmask it
            return self._refuse(res, masked, call, f"only {len(arrived)} of the {call.quorum} answers the call "
                                f"needs arrived; the sum is not released", "held")
        release = release_of(call, arrived, layout, noised, self.run_key)
        with self.releases.held():  # decided and recorded under the journal's lock (write-ahead)
            verdict = "release"
            if len(arrived) >= cfg.min_cohort:
                verdict, release, masked = self._decide(cfg, res, masked, call, release, layout, noised)
            if len(release.clients) < call.quorum:  # the caller would throw the sum away: never unmask it
                return self._refuse(res, masked, call, f"only {len(release.clients)} of the {call.quorum} answers "
                                    f"the call needs arrived; the sum is not released", "held")
            if len(release.clients) >= cfg.min_cohort:
                self.releases.add(release)
        survivors = sorted(release.clients)
        dropped = sorted(c for c in keys if c not in release.clients)
        # share holders: every client whose masked vector arrived, also those the rule left out of the sum
        revealed, why = self._reveal(cfg, keys, survivors, dropped, call, timeout, holders=arrived)
        if why is not None:  # discard the masked vectors: they are never unmasked
            self._refuse(res, masked, call, why)
            return
        total = [0] * masked[0][1].update.data.shape[0]
        for _, r in masked:
            total = [a + b for a, b in zip(total, r.update.ints())]
        total = self._remove_masks(total, keys, survivors, dropped, revealed, call)
        self.account["masked_messages"] += len(masked)
        self._record(release)
        self.account["release_rule"][verdict] += 1
        summed, low = per_cluster_support(template(layout).with_flat(decode([t % MOD for t in total])), cfg.min_cohort)
        tmpl = summed.zero()
        if low:
            self.account["low_support_clusters"] += low
            log.info("%s: %d per-cluster sum(s) from fewer than privacy.min_cohort=%d clients zeroed", call.label(),
                     low, cfg.min_cohort)
        if not cfg.min_cluster_count:
            self._disclose("small_cluster_totals", count_small_clusters(summed))
        for n, (k, r) in enumerate(masked):
            res.replies[k] = Reply(r.client_id, summed if n == 0 else tmpl, r.seconds, r.nbytes)

    def _decide(self, cfg: PrivacySettings, res: ExecResult, masked: list[tuple[int, Reply]], call: Call,
                release: Release, layout: str, noised: bool) -> tuple[str, Release, list[tuple[int, Reply]]]:
        """The release rule on the sum over ``release.clients``: the verdict, the release to make and the
        masked replies in it; raises :class:`ReleaseRefusedError` when it refuses."""
        key = (self.run_key, call.kind.value, call.stream_round, call.attempt) if self.run_key else None
        verdict, cohort, exposure = self.releases.decide(release.clients, release.statistics, noised,
                                                         blocks=self.blocks, min_cohort=cfg.min_cohort, key=key)
        if verdict in ("narrowed", "refused") and cfg.release_rule == "count":
            verdict, cohort = "release", release.clients
            before = self.releases.exposure(None, release.statistics, cfg.min_cohort).clients_in_small_groups
            self._disclose("differencing", max(1, exposure.clients_in_small_groups - before))
        if verdict == "refused":
            self.account["release_rule"]["refused"] += 1
            why = conflict_message(release.clients, exposure, self.releases.released, cfg.min_cohort)
            log.warning("%s: secure aggregation refused: %s", call.label(), why)
            res.replies = [r for r in res.replies if not isinstance(r.update, MaskedStats)]  # never unmasked
            raise ReleaseRefusedError(f"{self.run_name}: {call.label()}: secure aggregation refused the sum of "
                                      f"{len(release.clients)} clients: {why}; {refusal_fixes(self.blocks is not None)}")
        if verdict == "narrowed" and cohort is not None and cohort != release.clients:
            self._leave_out(res, [c for c in release.clients if c not in cohort], call)
            masked = [(k, r) for k, r in enumerate(res.replies) if isinstance(r.update, MaskedStats)]
            release = release_of(call, sorted(cohort), layout, noised, self.run_key)
        return verdict, release, masked

    def outside_releases(self) -> list[dict[str, Any]]:
        """The releases of calls outside runs so far (set-up, K selection, validation, plots)."""
        now = [r for r in self.account["releases"] if r["kind"] in OUTSIDE_KINDS and r not in self._outside]
        return list(self._outside) + now

    def remember(self, rows: list[dict[str, Any]]) -> None:
        """Add sums released elsewhere (a run in a server actor holds a copy of this layer)."""
        for r in rows:
            if r.get("summed"):
                self.releases.add(Release.of_row(r))

    def _record(self, release: Release) -> None:
        self.releases.add(release)  # (added before unmasking already: counted once)
        self.account["releases"].append({**release.row(), "summed": True})

    def _leave_out(self, res: ExecResult, out: list[int], call: Call) -> None:
        """Survivors the release rule leaves out of the sum: treated as dropped (their self-masks stay secret)."""
        why = (f"{call.label()}: left out of the secure sum by the release rule: with it, a combination of the "
               f"released sums would single out fewer than privacy.min_cohort clients")
        log.warning("%s: client(s) %s left out of the secure sum (release rule)", call.label(), out)
        gone = set(out)
        res.replies = [r for r in res.replies if r.client_id not in gone]
        for c in out:
            res.failed.append(c)
            res.errors[c] = why
        res.failed.sort()

    def _reveal(self, cfg: PrivacySettings, keys: Keys, survivors: list[int], dropped: list[int], call: Call,
                timeout: float | None, holders: list[int] | None = None
                ) -> tuple[dict[str, dict[int, dict[int, int]]], str | None]:
        """Ask the share ``holders`` (default: the survivors; clients left out of the sum hold shares too, and
        never reveal their own self-mask) for their shares: ``{"b": {v: {x: share}}, "s": ...}`` and why the
        round is refused (None when every needed secret has at least t shares)."""
        revealed: dict[str, dict[int, dict[int, int]]] = {"b": {}, "s": {}}
        if len(survivors) < cfg.min_cohort:
            return revealed, (f"only {len(survivors)} masked vector(s) arrived, below privacy.min_cohort="
                              f"{cfg.min_cohort}; their total would reveal too much")
        payload = {"run": self._run, "instance": self._instance, "survivors": survivors,
                   "dropped": dropped, "min_survivors": cfg.min_cohort}
        asked = sorted(set(survivors) | set(holders or ()))
        out = self._protocol(call, {c: Task(secagg_unmask, payload, None) for c in asked}, timeout)
        for r in out.replies:
            u = r.update
            x = r.client_id + 1
            for target, kind, share in zip(u["ids"].tolist(), u["kind"].tolist(), u["shares"]):
                revealed["b" if kind == 1 else "s"].setdefault(int(target), {})[x] = int.from_bytes(bytes(share), "little")
        surv = set(survivors)
        need = [(c, "b", revealed["b"].get(c, {})) for c in survivors]
        need += [(c, "s", revealed["s"].get(c, {})) for c in dropped if any(p in surv for p in keys[c]["peers"])]
        short = [(c, kind, len(sh), keys[c]["t"]) for c, kind, sh in need if len(sh) < keys[c]["t"]]
        if not short:
            return revealed, None
        c, kind, got, t = short[0]
        return revealed, (f"only {got} of the {t} shares needed to recover client {c}'s "
                          f"{'self-mask' if kind == 'b' else 'pairwise-mask key'} were returned")

    def _refuse(self, res: ExecResult, masked: list[tuple[int, Reply]], call: Call, why: str,
                counter: str = "refused_rounds") -> None:
        """Discard the masked replies (never unmasked): their clients count as failed."""
        if counter == "refused_rounds":
            self.account["refused_rounds"] += 1
        else:
            self.account["release_rule"][counter] += 1
        what = "held back" if counter == "held" else "refused"
        log.warning("%s: secure aggregation %s: %s", call.label(), what, why)
        for _, r in masked:
            res.failed.append(r.client_id)
            res.errors[r.client_id] = f"{call.label()}: secure aggregation {what}: {why}"
        res.replies = [r for r in res.replies if not isinstance(r.update, MaskedStats)]
        res.failed.sort()

    def _remove_masks(self, total: list[int], keys: Keys, survivors: list[int], dropped: list[int],
                      revealed: dict[str, dict[int, dict[int, int]]], call: Call) -> list[int]:
        """The survivors' self-masks and the masks they share with dropped clients, taken off ``total``."""
        L = len(total)
        for c in survivors:  # remove the self-masks PRG(b_u)
            b = shamir_combine(revealed["b"][c], keys[c]["t"]).to_bytes(32, "little")
            total = [a - m for a, m in zip(total, prg(b, L))]
        self.transcript["revealed"] = {"b": sorted(survivors), "s": []}
        surv = set(survivors)
        for v in dropped:  # masks that survivors share with clients whose vector did not arrive
            ups = [u for u in keys[v]["peers"] if u in surv]
            if not ups:
                continue
            sk = sk_from_int(shamir_combine(revealed["s"][v], keys[v]["t"]))
            if pk_bytes(sk) != bytes(keys[v]["s_pk"]):
                raise RoundFailedError(f"{call.label()}: secure aggregation: the key of client {v} reconstructed "
                                       f"from its shares does not match its public key")
            self.account["reconstructed_keys"] += 1
            self.transcript["revealed"]["s"].append(v)
            for u in ups:
                m = prg(pair_seed(sk, bytes(keys[u]["s_pk"]), self._run, self._instance, v, u), L)
                total = [(a - b) if u < v else (a + b) for a, b in zip(total, m)]
                self.account["recovered_masks"] += 1
        return total

    def report(self) -> dict[str, Any]:
        acc = {**self.account, "rounds": list(self.account["rounds"]), "releases": list(self.account["releases"]),
               "release_rule": {**self.account["release_rule"], **self.releases.isolation()},
               "disclosures": dict(self.account.get("disclosures", {}))}
        cfg = self.cfg
        acc["config"] = {"secure_aggregation": cfg.secure_aggregation, "mask_neighbors": cfg.mask_neighbors,
                         "min_cohort": cfg.min_cohort, "secagg_threshold": cfg.secagg_threshold,
                         "release_rule": cfg.release_rule,
                         "min_samples_guard": cfg.min_samples_guard, "min_cluster_count": cfg.min_cluster_count,
                         "dp": None if cfg.dp is None else cfg.dp.to_dict()}
        return {**self.inner.report(), "privacy": acc}

    def restore(self, report: dict[str, Any]) -> None:
        self.inner.restore(report)
        acc = dict(report.get("privacy", {}))
        acc.pop("config", None)
        if acc:
            self.account = {**new_account(), **acc}
            self.remember(self.account["releases"])

