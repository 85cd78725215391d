"""When the episodic index asks Postgres to refresh an owner's partition statistics."""

from storage.episodes import STATISTICS_FROM, passed_statistics_mark


def test_the_planners_statistics_are_refreshed_each_time_an_owner_doubles_from_512_messages():
    assert STATISTICS_FROM == 512
    assert [passed_statistics_mark(0, n) for n in (1, 511, 512, 5000)] == [False, False, True, True]
    assert [passed_statistics_mark(b, a) for b, a in ((511, 512), (512, 1023), (1023, 1024), (1024, 2047), (2047, 2048), (600, 1100))] == [
        True, False, True, False, True, True,
    ]
    assert not passed_statistics_mark(2048, 1500)  # a deletion is no mark
