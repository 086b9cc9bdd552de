"""lakefs-sdk API groups bound to one client, plus the few helpers tests keep needing."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import lakefs_sdk
from lakefs_sdk.api.branches_api import BranchesApi
from lakefs_sdk.api.commits_api import CommitsApi
from lakefs_sdk.api.config_api import ConfigApi
from lakefs_sdk.api.internal_api import InternalApi
from lakefs_sdk.api.metadata_api import MetadataApi
from lakefs_sdk.api.objects_api import ObjectsApi
from lakefs_sdk.api.refs_api import RefsApi
from lakefs_sdk.api.repositories_api import RepositoriesApi
from lakefs_sdk.api.staging_api import StagingApi
from lakefs_sdk.api.tags_api import TagsApi
from lakefs_sdk.models.branch_creation import BranchCreation
from lakefs_sdk.models.commit import Commit
from lakefs_sdk.models.commit_creation import CommitCreation
from lakefs_sdk.models.garbage_collection_rule import GarbageCollectionRule
from lakefs_sdk.models.garbage_collection_rules import GarbageCollectionRules
from lakefs_sdk.models.object_stats import ObjectStats
from lakefs_sdk.models.repository_creation import RepositoryCreation
from lakefs_sdk.models.reset_creation import ResetCreation


@dataclass
class Lakefs:
    client: lakefs_sdk.ApiClient

    def __post_init__(self) -> None:
        c = self.client
        self.repositories = RepositoriesApi(c)
        self.branches = BranchesApi(c)
        self.objects = ObjectsApi(c)
        self.commits = CommitsApi(c)
        self.refs = RefsApi(c)
        self.internal = InternalApi(c)
        self.metadata = MetadataApi(c)
        self.config = ConfigApi(c)
        self.staging = StagingApi(c)
        self.tags = TagsApi(c)

    def create_repo(self, name: str, namespace: str, default_branch: str = "main") -> None:
        self.repositories.create_repository(
            RepositoryCreation(name=name, storage_namespace=namespace, default_branch=default_branch)
        )

    def branch(self, repo: str, name: str, source: str, *, hidden: bool = False) -> None:
        self.branches.create_branch(repo, BranchCreation(name=name, source=source, hidden=hidden or None))

    def upload(self, repo: str, branch: str, path: str, data: bytes) -> ObjectStats:
        with tempfile.TemporaryDirectory() as tmp:
            file = Path(tmp) / "content"
            file.write_bytes(data)
            return self.objects.upload_object(repo, branch, path, content=str(file))

    def commit(self, repo: str, branch: str, message: str, *, date: int | None = None) -> Commit:
        return self.commits.commit(repo, branch, CommitCreation(message=message, var_date=date))

    def delete(self, repo: str, branch: str, path: str) -> None:
        self.objects.delete_object(repo, branch, path)

    def reset(self, repo: str, branch: str) -> None:
        self.branches.reset_branch(repo, branch, ResetCreation(type="reset"))

    def set_rules(self, repo: str, default_days: int, branches: dict[str, int] | None = None) -> None:
        rules = [GarbageCollectionRule(branch_id=b, retention_days=d) for b, d in (branches or {}).items()]
        self.repositories.set_gc_rules(
            repo, GarbageCollectionRules(default_retention_days=default_days, branches=rules)
        )
