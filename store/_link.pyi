from collections.abc import Callable, Sequence

#: Whether copy_blobs places compressed blobs (built with libzstd), else hands them back.
HAS_ZSTD: bool

def link_blobs(
    blob_dir: str,
    plans: Sequence[tuple[object, ...]],
    hexdigest: Callable[[bytes], str],
    touch_before: float,
    /,
) -> list[float | None]: ...
def copy_blobs(
    blob_dir: str,
    plans: Sequence[tuple[object, ...]],
    hexdigest: Callable[[bytes], str],
    touch_before: float,
    /,
) -> list[float | None]: ...
