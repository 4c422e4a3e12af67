"""Table maintenance beyond compaction: expiry, orphan files, manifests, dangling deletes, retention."""
