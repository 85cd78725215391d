"""A tiny conversation in LoCoMo's format (written here: the real data set is never copied into the repo)."""

from __future__ import annotations


def locomo_sample(sample_id: str = "tiny-1") -> dict:
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Caroline",
            "speaker_b": "Melanie",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Caroline", "dia_id": "D1:1", "text": "Hey Mel! I went to a LGBTQ support group yesterday and it was so powerful."},
                {"speaker": "Melanie", "dia_id": "D1:2", "text": "That's great, Caroline! I painted a lake sunrise last year."},
                {"speaker": "Caroline", "dia_id": "D1:3", "text": "I want to study counseling and work in mental health.",
                 "blip_caption": "a photo of a university brochure"},
                {"speaker": "Melanie", "dia_id": "D1:4", "text": "You would be a wonderful counselor."},
            ],
            "session_2_date_time": "7:55 pm on 25 May, 2023",
            "session_2": [
                {"speaker": "Melanie", "dia_id": "D2:1", "text": "I ran a charity race for mental health last Saturday."},
                {"speaker": "Caroline", "dia_id": "D2:2", "text": "Wow! My friends gave me a pottery bowl for my birthday."},
                {"speaker": "Caroline", "dia_id": "D2:3", "text": "I also adopted a cat called Oliver."},
                {"speaker": "Melanie", "dia_id": "D2:4", "text": "Oliver is a lovely name for a cat."},
            ],
        },
        "qa": [
            {"question": "When did Caroline go to the LGBTQ support group?", "answer": "7 May 2023", "evidence": ["D1:1"], "category": 2},
            {"question": "What did Caroline want to study?", "answer": "counseling, mental health", "evidence": ["D1:3"], "category": 1},
            {"question": "What is the name of Caroline's cat?", "answer": "Oliver", "evidence": ["D2:3"], "category": 4},
            {"question": "What did Melanie run for?", "answer": "mental health", "evidence": ["D2:1"], "category": 4},
            {"question": "What did Melanie paint?", "adversarial_answer": "a bowl", "evidence": [], "category": 5},
        ],
    }
