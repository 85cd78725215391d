"""The question's vector without the directions of its common words (knowledge.hybrid_ranking.without_directions)."""

import numpy as np

from knowledge.hybrid_ranking import without_directions


def test_what_is_left_is_unit_length_and_orthogonal_to_each_direction_taken_out():
    q = np.array([0.5, 0.5, 0.5, 0.5])
    left = np.asarray(without_directions(q, [[2.0, 0, 0, 0], [0, 0, 0, -1.0]]))
    assert np.allclose(left, [0, 1 / np.sqrt(2), 1 / np.sqrt(2), 0])


def test_two_alike_directions_both_leave_it_not_only_the_last():
    q = np.array([1.0, 0.0, 0.2])
    left = np.asarray(without_directions(q, [[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]]))
    assert np.allclose(left, [0, 0, 1])


def test_a_vector_that_is_nothing_but_the_direction_is_kept_as_it_was():
    q = [0.6, 0.8, 0.0]
    assert without_directions(q, [[3.0, 4.0, 0.0]]) == q


def test_no_direction_and_a_zero_direction_change_nothing_but_the_length():
    assert np.allclose(without_directions([3.0, 4.0], []), [0.6, 0.8])
    assert np.allclose(without_directions([3.0, 4.0], [[0.0, 0.0]]), [0.6, 0.8])
