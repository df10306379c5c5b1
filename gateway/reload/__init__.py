"""Policy files on disk to a loaded set: the file set, its manifest, reloads and their diffs."""
