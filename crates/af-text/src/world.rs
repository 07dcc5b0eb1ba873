//! A small world of video captions written by a grammar: the demo's data (fixtures/world), so a
//! fresh clone shows AF at work on text the project owns. Each video is one activity in one
//! place, told by one person in 4 to 7 captions: an opening, actions on the activity's objects,
//! and a closing. The language is simple and regular enough for the demo's tiny LMs to learn it
//! in seconds, so their endings read like the found ones and a stylistic committee has something
//! to be fooled by, which the word salad of an LM trained on 163 captions never gives it.

use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One activity: where it happens, and what is done there (`{o}` takes one of its objects).
struct Activity {
    places: &'static [&'static str],
    objects: &'static [&'static str],
    actions: &'static [&'static str],
}

const ACTIVITIES: &[Activity] = &[
    Activity {
        places: &["kitchen", "small kitchen", "restaurant kitchen"],
        objects: &["onions", "carrots", "tomatoes", "potatoes", "peppers"],
        actions: &[
            "picks up a knife and chops the {o} on a cutting board.",
            "puts the {o} into a large pan.",
            "stirs the pan with a wooden spoon.",
            "adds some salt and pepper to the {o}.",
            "pours oil into the pan and turns on the stove.",
            "washes the {o} in the sink.",
            "places the {o} on a white plate.",
            "tastes the food and nods.",
        ],
    },
    Activity {
        places: &["driveway", "parking lot", "garage"],
        objects: &["car", "truck", "van"],
        actions: &[
            "sprays the {o} with a hose.",
            "scrubs the side of the {o} with a sponge.",
            "rinses the soap off the {o}.",
            "dries the windows of the {o} with a towel.",
            "fills a bucket with soapy water.",
            "wipes the tires of the {o} with a rag.",
            "polishes the hood of the {o}.",
        ],
    },
    Activity {
        places: &["living room", "bedroom", "small studio"],
        objects: &["guitar", "violin", "drums", "piano"],
        actions: &[
            "plays a few notes on the {o}.",
            "adjusts the strings of the {o}.",
            "strums the {o} and sings along.",
            "plays the {o} faster and faster.",
            "stops playing and looks at the camera.",
            "points at the {o} and explains how to play it.",
            "picks up the {o} and starts a new song.",
        ],
    },
    Activity {
        places: &["skate park", "empty street", "parking lot"],
        objects: &["skateboard", "board", "scooter"],
        actions: &[
            "rides the {o} down a ramp.",
            "jumps over a small step on the {o}.",
            "falls off the {o} and gets back up.",
            "spins the {o} in the air and lands on it.",
            "pushes the {o} along the ground.",
            "grinds along a metal rail on the {o}.",
            "kicks the {o} up into the air.",
        ],
    },
    Activity {
        places: &["empty room", "hallway", "bedroom"],
        objects: &["wall", "door", "ceiling"],
        actions: &[
            "dips a roller into a tray of paint.",
            "paints the {o} with long strokes.",
            "covers the floor with a plastic sheet.",
            "tapes the edges of the {o}.",
            "climbs a ladder to reach the top of the {o}.",
            "adds a second coat of paint to the {o}.",
            "cleans the brush in a bucket of water.",
        ],
    },
    Activity {
        places: &["garden", "backyard", "field"],
        objects: &["flowers", "plants", "weeds", "bushes"],
        actions: &[
            "digs a hole in the dirt with a shovel.",
            "pulls the {o} out of the ground.",
            "waters the {o} with a green can.",
            "trims the {o} with a pair of scissors.",
            "spreads soil around the {o}.",
            "puts the {o} into a wheelbarrow.",
            "kneels down and looks at the {o}.",
        ],
    },
    Activity {
        places: &["bathroom", "backyard", "laundry room"],
        objects: &["dog", "puppy", "cat"],
        actions: &[
            "puts the {o} into a tub of water.",
            "rubs shampoo into the fur of the {o}.",
            "rinses the {o} with warm water.",
            "wraps the {o} in a large towel.",
            "brushes the fur of the {o}.",
            "holds the {o} while it shakes off the water.",
            "gives the {o} a small treat.",
        ],
    },
    Activity {
        places: &["beach", "gym", "park"],
        objects: &["volleyball", "ball", "frisbee"],
        actions: &[
            "throws the {o} to a friend.",
            "hits the {o} over the net.",
            "runs across the sand to catch the {o}.",
            "dives to the ground after the {o}.",
            "serves the {o} to the other team.",
            "bounces the {o} a few times.",
            "high fives the other players.",
        ],
    },
    Activity {
        places: &["laundry room", "bedroom", "living room"],
        objects: &["shirt", "pants", "dress", "jacket"],
        actions: &[
            "lays the {o} flat on an ironing board.",
            "sprays water on the {o}.",
            "moves the iron slowly across the {o}.",
            "turns the {o} over and irons the back.",
            "folds the {o} and sets it aside.",
            "hangs the {o} on a hanger.",
            "checks the iron and turns up the heat.",
        ],
    },
    Activity {
        places: &["workshop", "garage", "driveway"],
        objects: &["bike", "bicycle", "wheel"],
        actions: &[
            "turns the {o} upside down on the floor.",
            "takes the tire off the {o}.",
            "pumps air into the tire of the {o}.",
            "tightens a bolt on the {o} with a wrench.",
            "oils the chain of the {o}.",
            "spins the {o} to check it.",
            "rides the {o} around the {p}.",
        ],
    },
    Activity {
        places: &["living room", "hallway", "kitchen"],
        objects: &["floor", "carpet", "rug"],
        actions: &[
            "pushes a mop across the {o}.",
            "sweeps the {o} with a broom.",
            "vacuums the {o} in long lines.",
            "dips the mop into a bucket.",
            "moves a chair to clean under it.",
            "scrubs a stain on the {o}.",
            "picks up some toys from the {o}.",
        ],
    },
    Activity {
        places: &["kitchen", "bakery", "dining room"],
        objects: &["cake", "cupcakes", "cookies"],
        actions: &[
            "spreads frosting over the {o}.",
            "adds sprinkles to the top of the {o}.",
            "cuts the {o} into small pieces.",
            "puts the {o} into the oven.",
            "takes the {o} out of the oven.",
            "mixes flour and sugar in a bowl.",
            "writes a name on the {o} with icing.",
        ],
    },
];

/// The one person a video is about: how the first caption names them, how later ones do.
const PEOPLE: &[(&str, &str, &str)] = &[
    ("A man", "The man", "He"),
    ("A woman", "The woman", "She"),
    ("A young girl", "The girl", "She"),
    ("A little boy", "The boy", "He"),
    ("An old man", "The old man", "He"),
    ("An old woman", "The old woman", "She"),
    ("A teenager", "The teenager", "He"),
    ("A young woman", "The young woman", "She"),
];

const LOOKS: &[&str] = &[
    "in a red shirt",
    "wearing a black hat",
    "in a blue jacket",
    "with long hair",
    "wearing glasses",
    "in a green sweater",
];

const OPENINGS: &[&str] = &[
    "{A} is seen standing in a {p}.",
    "{A} {look} is standing in a {p}.",
    "{A} is talking to the camera in a {p}.",
    "{A} {look} walks into a {p}.",
    "{A} is shown in a {p} next to the {o}.",
];

/// What may stand between the subject and its verb; SWAG keeps it on the noun phrase's side.
const ADVERBS: &[&str] = &[
    "then",
    "then",
    "now",
    "slowly",
    "carefully",
    "quickly",
    "again",
];

const CLOSINGS: &[&str] = &[
    "smiles at the camera.",
    "waves to the camera.",
    "walks out of the {p}.",
    "puts everything away and leaves.",
    "looks at the {o} and laughs.",
    "stands back to look at the work.",
];

/// `videos` videos of the world, ids `v_world0000`.., each as its captions in order; the same
/// seed gives the same world.
pub fn videos(videos: usize, seed: u64) -> Vec<(String, Vec<String>)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..videos)
        .map(|v| {
            let activity = ACTIVITIES.choose(&mut rng).expect("activities");
            let (first, again, pronoun) = *PEOPLE.choose(&mut rng).expect("people");
            let place = *activity.places.choose(&mut rng).expect("places");
            let object = *activity.objects.choose(&mut rng).expect("objects");
            let fill = |t: &str, rng: &mut ChaCha8Rng| {
                t.replace("{A}", first)
                    .replace("{look}", LOOKS.choose(rng).expect("looks"))
                    .replace("{p}", place)
                    .replace("{o}", object)
            };
            let mut captions = vec![fill(OPENINGS.choose(&mut rng).expect("openings"), &mut rng)];
            let mut actions: Vec<&str> = activity.actions.to_vec();
            let n = rng.random_range(2..=5);
            for _ in 0..n {
                let a = actions.remove(rng.random_range(0..actions.len()));
                captions.push(format!(
                    "{} {}",
                    subject(&mut rng, again, pronoun),
                    fill(a, &mut rng)
                ));
            }
            if rng.random_bool(0.8) {
                captions.push(format!(
                    "{} {}",
                    subject(&mut rng, again, pronoun),
                    fill(CLOSINGS.choose(&mut rng).expect("closings"), &mut rng)
                ));
            }
            (format!("v_world{v:04}"), captions)
        })
        .collect()
}

/// A later caption's subject: the pronoun or the definite noun phrase, sometimes with an adverb.
fn subject(rng: &mut ChaCha8Rng, again: &str, pronoun: &str) -> String {
    let who = if rng.random_bool(0.6) { pronoun } else { again };
    if rng.random_bool(0.35) {
        format!("{who} {}", ADVERBS.choose(rng).expect("adverbs"))
    } else {
        who.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_world_is_seeded_and_every_caption_is_a_sentence() {
        let a = videos(50, 3);
        assert_eq!(a, videos(50, 3), "the same seed, the same world");
        assert_ne!(a, videos(50, 4));
        for (_, captions) in &a {
            assert!((3..=7).contains(&captions.len()), "{captions:?}");
            for c in captions {
                assert!(
                    c.ends_with('.')
                        && !c.contains('{')
                        && c.chars().next().is_some_and(char::is_uppercase),
                    "{c}"
                );
            }
        }
    }
}
