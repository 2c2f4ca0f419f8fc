def lld(
    raw: bytes, /
) -> (
    tuple[
        str | None,
        str | None,
        tuple[str, ...],
        tuple[str, ...],
        list[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]],
    ]
    | None
): ...
