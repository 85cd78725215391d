"""When a search goes through its partition's shared HNSW index (storage.partitions.through_hnsw)."""

from storage.partitions import through_hnsw


def test_an_owner_who_dominates_their_partition_is_searched_through_the_index():
    assert through_hnsw(100_000, 114_000, 30)  # the bench's 100,000-message user among 1,000,000 rows


def test_an_owner_among_many_as_large_on_one_partition_is_searched_exactly():
    # The iterative scan would pass ~47 rows for each of theirs: more than reading their own.
    assert not through_hnsw(250, 11_750, 100)
    assert not through_hnsw(5_000, 235_000, 200)


def test_without_statistics_the_partition_counts_as_the_owner_alone():
    assert through_hnsw(5_000, 0, 200) and not through_hnsw(0, 0, 10)
